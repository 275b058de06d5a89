//! The public ids of deliveries and attempts: keyed by the installation's own secret, made once
//! in the database, so every store opened on one database (every process of a fleet, and the
//! same process after a restart) spells every row the same way.

use super::*;
use sluice::ids::{ATTEMPT, DELIVERY};

/// What ids of rows 1–50 read as under `store`'s key.
fn spelled(store: &SharedStore) -> Vec<String> {
    (1..=50)
        .map(|n| store.row_ids().format(DELIVERY, n))
        .collect()
}

/// The key is a setting, made at open; ids of one store read back, and not under another key.
async fn check_row_ids_are_keyed_by_the_database(store: SharedStore) {
    let key = store.setting(ROW_ID_KEY_SETTING).await.unwrap();
    assert_eq!(
        key.as_deref().map(str::len),
        Some(64),
        "32 random bytes as hex"
    );
    let ids = spelled(&store);
    for (n, id) in (1..).zip(&ids) {
        assert_eq!(store.row_ids().parse(DELIVERY, id), Some(n), "{id}");
        assert_eq!(store.row_ids().parse(ATTEMPT, id), None, "{id}");
    }
    let (other, _dir) = support::fresh_sqlite();
    assert_ne!(spelled(&other), ids, "another database, another key");
}

support::drivers!(check_row_ids_are_keyed_by_the_database);

/// Two stores on one SQLite file (two processes, or a restart) spell rows alike.
#[test]
fn stores_on_one_sqlite_file_agree() {
    support::drivers::runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let open = || -> SharedStore {
            Arc::new(sluice::store::sqlite::SqliteStore::open(&path, Default::default()).unwrap())
        };
        let (a, b) = (open(), open());
        assert_eq!(spelled(&a), spelled(&b));
        let before = spelled(&a);
        drop((a, b));
        assert_eq!(spelled(&open()), before, "the same after a restart");
    });
}

/// Processes of a fleet starting at once on an empty PostgreSQL database race to make the key:
/// one wins and every one uses it; a store opened later agrees too.
#[test]
fn stores_on_one_postgres_database_agree() {
    support::drivers::runtime().block_on(async {
        let Some(url) = support::fresh_postgres().await else {
            return;
        };
        let stores =
            futures_util::future::join_all((0..4).map(|_| support::postgres_store(&url))).await;
        let first = spelled(&stores[0]);
        for s in &stores[1..] {
            assert_eq!(spelled(s), first);
        }
        let later = support::postgres_store(&url).await;
        assert_eq!(spelled(&later), first);
    });
}
