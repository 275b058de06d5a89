//! One test body run on both store drivers: [`drivers!`](crate::drivers!).
//!
//! ```ignore
//! async fn settles_once(store: SharedStore) { /* … */ }
//! async fn survives_a_restart(raw: RawSettings) { /* … */ }
//! sluice_testkit::drivers!(settles_once, survives_a_restart);
//!
//! fn any_bytes_read_back(rt: &tokio::runtime::Runtime, store: SharedStore) { /* … */ }
//! sluice_testkit::drivers!(blocking: any_bytes_read_back);
//! // or both kinds in one module: drivers!(settles_once; blocking: any_bytes_read_back);
//! ```
//!
//! Each name becomes two tests, `sqlite::name` and `postgres::name`. What the body receives
//! follows from its parameter's type (see [`Given`]): a fresh [`SharedStore`], or the
//! [`RawSettings`] of a test server on that driver. `blocking:` bodies are plain functions given
//! the test's runtime as well, for what cannot run inside one (a proptest runner that calls
//! `block_on` per case). PostgreSQL comes from `SLUICE_TEST_DATABASE_URL`; without it the
//! PostgreSQL test is skipped loudly, or fails under `SLUICE_REQUIRE_SERVICES=1` (see
//! [`services`](crate::services)).

use std::future::Future;

use sluice::config::RawSettings;
use sluice::store::SharedStore;
use tokio::runtime::Runtime;

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The embedded default, in a temporary directory.
    Sqlite,
    /// A fresh PostgreSQL database.
    Postgres,
}

/// What a test body can be given on a driver.
pub trait Given: Sized {
    /// Make one on `driver`, with whatever must outlive the test (a temporary directory);
    /// `None` when PostgreSQL is asked for and there is none (a loud skip, or a failure in CI).
    fn given(driver: Driver) -> impl Future<Output = Option<(Self, Keep)>>;
}

/// What a [`Given`] keeps alive until the test ends.
pub struct Keep {
    _dir: Option<tempfile::TempDir>,
}

/// A fresh, empty store.
impl Given for SharedStore {
    async fn given(driver: Driver) -> Option<(Self, Keep)> {
        match driver {
            Driver::Sqlite => {
                let (store, dir) = crate::fresh_sqlite();
                Some((store, Keep { _dir: Some(dir) }))
            }
            Driver::Postgres => Some((crate::fresh_postgres_store().await?, Keep { _dir: None })),
        }
    }
}

/// [`test_settings`](crate::test_settings) on the driver: a fresh PostgreSQL database in
/// `database_url`, or none (the server then makes its own temporary SQLite directory).
impl Given for RawSettings {
    async fn given(driver: Driver) -> Option<(Self, Keep)> {
        let mut raw = crate::test_settings();
        if driver == Driver::Postgres {
            raw.database_url = Some(crate::fresh_postgres().await?);
        }
        Some((raw, Keep { _dir: None }))
    }
}

/// The runtime every driver test runs on: multi-threaded, two workers.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Run an async `body` on `driver` (what [`drivers!`](crate::drivers!) generates).
pub fn run<G: Given, F: Future<Output = ()>>(driver: Driver, body: impl FnOnce(G) -> F) {
    let rt = runtime();
    rt.block_on(async {
        if let Some((given, _keep)) = G::given(driver).await {
            body(given).await;
        }
    });
}

/// Run a blocking `body` on `driver`, handing it the runtime (what `drivers!(blocking: …)`
/// generates).
pub fn run_blocking<G: Given>(driver: Driver, body: impl FnOnce(&Runtime, G)) {
    let rt = runtime();
    if let Some((given, _keep)) = rt.block_on(G::given(driver)) {
        body(&rt, given);
    }
}

/// Run each named test body on SQLite and on PostgreSQL, as `sqlite::name` and
/// `postgres::name`; see [the module](crate::drivers). Async bodies first, then any blocking
/// ones after `blocking:`. One invocation per module (it defines the modules `sqlite` and
/// `postgres`); the bodies are the module's own functions.
#[macro_export]
macro_rules! drivers {
    (@pair [$($name:ident),*] [$($blocking:ident),*]) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    $crate::drivers::run($crate::drivers::Driver::Sqlite, super::$name);
                }
            )*
            $(
                #[test]
                fn $blocking() {
                    $crate::drivers::run_blocking($crate::drivers::Driver::Sqlite, super::$blocking);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    $crate::drivers::run($crate::drivers::Driver::Postgres, super::$name);
                }
            )*
            $(
                #[test]
                fn $blocking() {
                    $crate::drivers::run_blocking($crate::drivers::Driver::Postgres, super::$blocking);
                }
            )*
        }
    };
    (blocking: $($blocking:ident),* $(,)?) => {
        $crate::drivers!(@pair [] [$($blocking),*]);
    };
    ($($name:ident),+ ; blocking: $($blocking:ident),* $(,)?) => {
        $crate::drivers!(@pair [$($name),+] [$($blocking),*]);
    };
    ($($name:ident),* $(,)?) => {
        $crate::drivers!(@pair [$($name),*] []);
    };
}
