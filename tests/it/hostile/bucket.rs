//! Defect 9, presigned redirects, against a real `tributary run` whose bitstreams live in a
//! real S3 bucket (SeaweedFS, `support::s3`): a client that follows the `307` gets from the
//! bucket the protections Tributary itself would have sent (`attachment` for an HTML page,
//! the recorded type) and cannot change the signed overrides.

// The test holds the shared S3 server's one-at-a-time guard (a std mutex) for its whole run,
// awaits included: it has a runtime of its own, so no other task waits on that thread.
#![allow(clippy::await_holding_lock)]

use std::sync::{Arc, OnceLock};

use crate::support::net::free_port;
use crate::support::rs::urlset;
use crate::support::s3;
use crate::support::service::Service;
use crate::support::upstream::{Hit, Reply, Upstream};

use super::LIMIT;

/// A Source of two resources large enough to go to the bucket, their types declared in the
/// Resource List: an HTML page with script and a plain-text file.
async fn upstream(page: Vec<u8>, text: Vec<u8>) -> Upstream {
    let base: Arc<OnceLock<String>> = Arc::default();
    let named = base.clone();
    let up = Upstream::start(move |hit: &Hit, _| {
        let b = named.get().expect("the base is set before the first request");
        let (sd, cap, rl) = (format!("{b}/.well-known/resourcesync"), format!("{b}/cap.xml"), format!("{b}/rl.xml"));
        match hit.path.as_str() {
            "/.well-known/resourcesync" => Reply::xml(urlset("description", &[], &[(&cap, "capabilitylist")])),
            "/cap.xml" => Reply::xml(urlset("capabilitylist", &[("up", &sd)], &[(&rl, "resourcelist")])),
            "/rl.xml" => Reply::xml(format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\" \
                 xmlns:rs=\"http://www.openarchives.org/rs/terms/\">\n<rs:ln rel=\"up\" href=\"{cap}\"/>\n\
                 <rs:md capability=\"resourcelist\" at=\"2024-01-01T00:00:00Z\"/>\n\
                 <url><loc>{b}/page.html</loc><rs:md type=\"text/html; charset=utf-8\"/></url>\n\
                 <url><loc>{b}/notes.txt</loc><rs:md type=\"text/plain\"/></url>\n</urlset>\n"
            )),
            "/page.html" => Reply::ok(page.clone()).header("content-type", "text/html; charset=utf-8"),
            "/notes.txt" => Reply::ok(text.clone()).header("content-type", "text/plain"),
            _ => Reply::status(404),
        }
    })
    .await;
    base.set(format!("http://{}", up.addr)).unwrap();
    up
}

#[tokio::test(flavor = "multi_thread")]
async fn presigned_redirects_keep_the_protections_at_the_bucket() {
    let Some((server, _one)) = s3::server("hostile::bucket::presigned_redirects") else { return };
    let bucket = server.bucket("hostile");
    let page = format!("<html><script>window.pwned = 1</script>{}</html>", "x".repeat(90_000)).into_bytes();
    let text = "y".repeat(90_000).into_bytes();
    let up = upstream(page.clone(), text.clone()).await;
    let port = free_port();
    let config = format!(
        "[aggregator]\nbase_url = \"http://127.0.0.1:{port}/\"\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"store\"\n\
         user_agent = \"Tributary-test/0.1 (+mailto:test@example.org)\"\nblobs = \"s3://{bucket}/p\"\n\
         blobs_create_bucket = true\nblobs_presign = true\n\n\
         [[source]]\nid = \"s\"\nurl = \"http://{}/.well-known/resourcesync\"\nallow_private = true\n\
         rate = \"unlimited\"\npoll = \"1h\"\n",
        up.addr
    );
    let dir = tempfile::tempdir().unwrap();
    let env = s3::env(&server.endpoint);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Service::start(dir.path(), &config, &[], &env).await;
    let list = |s: &Service| {
        let s = s.base.clone();
        async move { reqwest::get(format!("{s}sets/s/resourcelist.xml")).await.ok()?.text().await.ok() }
    };
    s.wait_until("both resources are published", LIMIT, |s| {
        let list = list(s);
        async move { list.await.is_some_and(|l| l.contains("page.html") && l.contains("notes.txt")) }
    })
    .await;
    let published = list(&s).await.unwrap();
    let loc = |name: &str| {
        let at = published.find(name).unwrap();
        let start = published[..at].rfind("<loc>").unwrap() + "<loc>".len();
        published[start..at + name.len()].to_owned()
    };

    let direct = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let following = reqwest::Client::builder().redirect(reqwest::redirect::Policy::limited(2)).build().unwrap();
    for (name, body, content_type, disposition) in
        [("page.html", &page, "text/html; charset=utf-8", "attachment"), ("notes.txt", &text, "text/plain", "inline")]
    {
        let uri = loc(name);
        let redirect = direct.get(&uri).send().await.unwrap();
        assert_eq!(redirect.status(), 307, "{uri}: a full GET goes to the bucket");
        let location = redirect.headers()["location"].to_str().unwrap().to_owned();
        assert!(location.starts_with(&server.endpoint), "{location}");
        assert!(!location.contains(s3::SECRET_KEY), "the secret never leaves Tributary");
        let fetched = following.get(&uri).send().await.unwrap();
        assert_eq!(fetched.status(), 200, "{uri}");
        assert!(fetched.url().as_str().starts_with(&server.endpoint), "answered by the bucket");
        assert_eq!(fetched.headers()["content-type"], content_type, "{uri}");
        assert_eq!(fetched.headers()["content-disposition"], disposition, "{uri}");
        assert_eq!(&fetched.bytes().await.unwrap()[..], &body[..]);
        if name == "page.html" {
            let tampered =
                location.replace("response-content-disposition=attachment", "response-content-disposition=inline");
            assert_ne!(tampered, location, "{location}");
            assert_eq!(direct.get(&tampered).send().await.unwrap().status(), 403, "the overrides are signed");
        }
    }
}
