//! The store's own CPU time: the PostgreSQL server's processes (the postmaster and every child
//! it runs, read from `/proc`), or the embedded SQLite driver's threads in this process. Linux
//! only; elsewhere every reading is `None`.
//!
//! On PostgreSQL the figure is the whole server: the backends serving this run, and also the
//! walwriter, checkpointer and autovacuum, which work for it too. A server shared with other
//! work counts that work as well, so measure on a server of your own.

use super::sys::TICKS_PER_S;

/// Where the store's CPU time is read.
#[derive(Debug, Clone)]
pub(crate) enum StoreCpu {
    /// A PostgreSQL server on this machine, by its postmaster's pid.
    Postgres {
        /// The postmaster.
        postmaster: u32,
    },
    /// The embedded SQLite driver: its writer and reader threads in this process.
    Sqlite,
    /// Not readable (a remote server, `--target`, not Linux).
    Unknown,
}

impl StoreCpu {
    /// Locate the store of a run: `database_url` names PostgreSQL (its server must run on this
    /// machine), none means the embedded SQLite in this process.
    pub(crate) async fn locate(database_url: Option<&str>, embedded: bool) -> Self {
        if !embedded || !cfg!(target_os = "linux") {
            return StoreCpu::Unknown;
        }
        let Some(url) = database_url else {
            return StoreCpu::Sqlite;
        };
        match postmaster_of(url).await {
            Some(postmaster) => StoreCpu::Postgres { postmaster },
            None => StoreCpu::Unknown,
        }
    }

    /// Is this PostgreSQL?
    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self, StoreCpu::Postgres { .. })
    }

    /// CPU seconds (user + system) the store has used so far.
    pub(crate) fn seconds(&self) -> Option<f64> {
        match self {
            StoreCpu::Postgres { postmaster } => server_ticks(*postmaster).map(|t| t / TICKS_PER_S),
            StoreCpu::Sqlite => sqlite_thread_ticks().map(|t| t / TICKS_PER_S),
            StoreCpu::Unknown => None,
        }
    }
}

/// The postmaster of the server at `url`: the parent of the backend serving a connection.
async fn postmaster_of(url: &str) -> Option<u32> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    let task = tokio::spawn(connection);
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .ok()?
        .get(0);
    let postmaster = parent_of(u32::try_from(backend).ok()?);
    drop(client);
    let _ = task.await;
    postmaster
}

fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(&format!("/proc/{pid}/stat")).and_then(|f| f.get(1)?.parse().ok())
}

/// The fields of a `stat` file from field 3 (state) on: the command name may hold spaces and
/// parentheses, so the split starts after the last ')'.
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// utime + stime (fields 14 and 15 of stat(5)), plus cutime + cstime (16, 17) when `reaped`.
fn ticks(fields: &[String], reaped: bool) -> Option<f64> {
    let field = |i: usize| fields.get(i)?.parse::<f64>().ok();
    let own = field(11)? + field(12)?;
    Some(if reaped {
        own + field(13)? + field(14)?
    } else {
        own
    })
}

/// The postmaster's own ticks and those of the children it already reaped (backends that
/// ended), plus every live child's.
fn server_ticks(postmaster: u32) -> Option<f64> {
    let mut total = ticks(&stat_fields(&format!("/proc/{postmaster}/stat"))?, true)?;
    let parent = postmaster.to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if let Some(fields) = stat_fields(&format!("/proc/{pid}/stat"))
            && fields.get(1) == Some(&parent)
        {
            total += ticks(&fields, false).unwrap_or(0.0);
        }
    }
    Some(total)
}

/// The ticks of this process's threads named after the SQLite driver (its writer and readers).
fn sqlite_thread_ticks() -> Option<f64> {
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("sluice-sqlite") {
            continue;
        }
        if let Some(fields) = stat_fields(&dir.join("stat").display().to_string()) {
            total += ticks(&fields, false).unwrap_or(0.0);
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process is nobody's postmaster, but the arithmetic holds: a process's own ticks
    /// plus its reaped children's, and a parent found for it.
    #[test]
    fn reads_a_process_and_its_parent() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let me = std::process::id();
        assert!(parent_of(me).is_some());
        let fields = stat_fields(&format!("/proc/{me}/stat")).unwrap();
        let own = ticks(&fields, false).unwrap();
        assert!(ticks(&fields, true).unwrap() >= own);
        assert!(server_ticks(me).unwrap() >= own);
        assert!(sqlite_thread_ticks().is_some());
    }
}
