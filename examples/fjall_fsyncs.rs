//! What fjall itself syncs to create a database, for the store-creation figure in
//! docs/BENCHMARKS.md: `fjall_fsyncs DIR N` creates a database at `DIR` (which must not exist)
//! with `N` keyspaces of default options and persists it, and nothing else. Count its syncs
//! with `strace -f -c -e trace=fsync,fdatasync`; a Tributary store cannot be created with fewer
//! than this program needs for its six keyspaces.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(n)) = (args.next(), args.next()) else {
        return Err("usage: fjall_fsyncs DIR KEYSPACES".into());
    };
    if std::path::Path::new(&dir).exists() {
        return Err(format!("{dir} exists: the count is of a database being created").into());
    }
    let db = fjall::Database::builder(&dir).open()?;
    for i in 0..n.parse::<usize>()? {
        db.keyspace(&format!("k{i}"), fjall::KeyspaceCreateOptions::default)?;
    }
    db.persist(fjall::PersistMode::SyncAll)?;
    Ok(())
}
