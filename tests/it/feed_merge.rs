//! FeedSync merge converges (seed `002_…` §1.3, §3.3): whatever the order in which the
//! versions of an item arrive, and however often, merging them ends in the same canonical
//! state; a version already merged changes nothing; and endpoints that subscribe to each
//! other agree once each has incorporated the other's feed.
//!
//! The versions come from a simulated mesh of 2–4 endpoints that update their own copy of one
//! item and now and then incorporate another endpoint's copy first, so they form a causal DAG
//! with concurrent updates, conflicts, their resolution, deletions and same-second clocks.

use proptest::prelude::*;
use proptest::sample::Index;
use tributary::model::W3cDateTime;
use tributary::model::feed::{FeedItem, Merged, create_sync, local_update, merge};

/// One step of the simulated mesh.
#[derive(Debug, Clone)]
struct Step {
    endpoint: usize,
    /// Incorporate this endpoint's copy first, as a subscriber to its feed would.
    pull: Option<usize>,
    /// Then update the copy.
    update: bool,
    /// The update is a deletion; a later plain update un-deletes.
    delete: bool,
    /// Seconds the shared clock advances first; 0 makes same-second updates.
    tick: u8,
}

#[derive(Debug, Clone)]
struct Mesh {
    endpoints: usize,
    /// Set at creation, so the same in every version (§2.4).
    noconflicts: bool,
    /// Per-endpoint clock error in seconds: `when` is uncalibrated (§2.5).
    skew: Vec<i8>,
    steps: Vec<Step>,
}

fn mesh() -> impl Strategy<Value = Mesh> {
    (2usize..=4, prop::bool::weighted(0.25)).prop_flat_map(|(endpoints, noconflicts)| {
        let step = (
            0..endpoints,
            prop::option::of(0..endpoints),
            prop::bool::weighted(0.7),
            prop::bool::weighted(0.15),
            0u8..3,
        )
            .prop_map(|(endpoint, pull, update, delete, tick)| Step { endpoint, pull, update, delete, tick });
        (prop::collection::vec(-2i8..=2, endpoints), prop::collection::vec(step, 4..20))
            .prop_map(move |(skew, steps)| Mesh { endpoints, noconflicts, skew, steps })
    })
}

fn endpoint(i: usize) -> String {
    format!("EP{i}")
}

fn at(seconds: i64) -> W3cDateTime {
    W3cDateTime::from_unix(1_116_668_613 + seconds, 0).unwrap()
}

fn entry(xml: String) -> FeedItem {
    FeedItem { id: None, title: None, link: None, updated: None, enclosure: None, sync: None, xml }
}

/// Runs the mesh: endpoint 0 creates the item. Returns every version any endpoint held, in
/// the order they appeared, and each endpoint's final copy.
fn run(mesh: &Mesh) -> (Vec<FeedItem>, Vec<Option<FeedItem>>) {
    let mut copies: Vec<Option<FeedItem>> = vec![None; mesh.endpoints];
    let mut created = entry("<entry>created</entry>".into());
    create_sync(&mut created, "item_1".into(), &endpoint(0), at(0)).noconflicts = mesh.noconflicts;
    copies[0] = Some(created.clone());
    let mut versions = vec![created];
    let mut clock = 0;
    for (n, step) in mesh.steps.iter().enumerate() {
        let e = step.endpoint;
        clock += i64::from(step.tick);
        if let Some(incoming) = step.pull.filter(|&from| from != e).and_then(|from| copies[from].clone())
            && let Merged::New(merged) | Merged::Changed(merged) = merge(copies[e].as_ref(), &incoming)
        {
            versions.push(merged.clone());
            copies[e] = Some(merged);
        }
        if step.update
            && let Some(copy) = copies[e].as_mut()
        {
            copy.xml = format!("<entry>{} #{n}</entry>", endpoint(e));
            assert!(local_update(copy, &endpoint(e), at(clock + i64::from(mesh.skew[e])), step.delete));
            versions.push(copy.clone());
        }
    }
    (versions, copies)
}

/// Merges `versions` in `order` into an empty local state, checking on the way that each
/// version merged a second time right away is `Unchanged`.
fn incorporate(versions: &[FeedItem], order: &[usize]) -> Result<FeedItem, TestCaseError> {
    let mut state: Option<FeedItem> = None;
    for &i in order {
        if let Merged::New(merged) | Merged::Changed(merged) = merge(state.as_ref(), &versions[i]) {
            state = Some(merged);
        }
        prop_assert_eq!(merge(state.as_ref(), &versions[i]), Merged::Unchanged, "version {} again", i);
    }
    state.ok_or_else(|| TestCaseError::fail("nothing merged"))
}

/// The merge of `incoming` into `local`, as the item the local endpoint then holds.
fn merged(local: &FeedItem, incoming: &FeedItem) -> FeedItem {
    match merge(Some(local), incoming) {
        Merged::New(item) | Merged::Changed(item) => item,
        Merged::Unchanged => local.clone(),
    }
}

/// 256 cases of at most 39 versions: well under a second.
fn config() -> ProptestConfig {
    let saved = proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions");
    ProptestConfig { failure_persistence: Some(Box::new(saved)), ..ProptestConfig::with_cases(256) }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_order_of_arrival_converges_and_merging_again_changes_nothing(
        mesh in mesh(),
        shuffles in prop::collection::vec(prop::collection::vec(any::<u32>(), 48), 1..5),
        repeats in prop::collection::vec((any::<Index>(), any::<Index>()), 0..6),
    ) {
        let (versions, _) = run(&mesh);
        let published: Vec<usize> = (0..versions.len()).collect();
        let reference = incorporate(&versions, &published)?;
        for keys in &shuffles {
            let mut order = published.clone();
            order.sort_by_key(|&i| (keys[i % keys.len()], i));
            for (which, position) in &repeats {
                order.insert(position.index(order.len() + 1), which.index(versions.len()));
            }
            let state = incorporate(&versions, &order)?;
            prop_assert_eq!(&state, &reference, "order {:?}", order);
            for (i, version) in versions.iter().enumerate() {
                prop_assert_eq!(merge(Some(&state), version), Merged::Unchanged, "version {} after all", i);
            }
        }
    }

    #[test]
    fn cross_subscribed_endpoints_agree_after_reading_each_others_feed(mesh in mesh()) {
        let (_, copies) = run(&mesh);
        let copies: Vec<&FeedItem> = copies.iter().flatten().collect();
        for (i, a) in copies.iter().enumerate() {
            for b in &copies[i + 1..] {
                let (a_sees_b, b_sees_a) = (merged(a, b), merged(b, a));
                prop_assert_eq!(&a_sees_b, &b_sees_a);
                prop_assert_eq!(merged(&a_sees_b, a), a_sees_b.clone());
                prop_assert_eq!(merged(&a_sees_b, b), a_sees_b);
            }
        }
    }
}
