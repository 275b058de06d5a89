//! A whole fleet can start at once: three `sluice serve` processes started together on an
//! empty PostgreSQL database all migrate, agree on one generated admin token and become ready;
//! none exits. Repeated on fresh databases because it is a race.

use sluice_testkit as support;

use std::time::{Duration, Instant};

use sluice_testkit::process::Process;

fn spawn(db: &str) -> Process {
    Process::command("serve")
        .listen()
        .args(&[
            "--database-url",
            db,
            "--concurrency",
            "16",
            "--log-format",
            "json",
        ])
        // No admin token from the environment: the fleet must agree on a generated one.
        .env_remove("SLUICE_ADMIN_TOKEN")
        .env("SLUICE_LOG", "warn")
        .spawn()
}

fn report(procs: &mut [Process]) -> String {
    procs
        .iter_mut()
        .enumerate()
        .map(|(i, p)| {
            let exited = p.exited();
            format!(
                "process {i} (port {}, {:?}):\n--- stdout\n{}--- stderr\n{}",
                p.port,
                exited,
                p.stdout_so_far(),
                p.stderr_so_far(),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_started_at_once_on_an_empty_database_all_become_ready() {
    let http = support::http();
    for round in 1..=3 {
        let Some(db) = support::fresh_postgres().await else {
            return;
        };
        let mut procs: Vec<Process> = (0..3).map(|_| spawn(&db)).collect();

        let until = Instant::now() + Duration::from_secs(60);
        let mut ready = [false; 3];
        while !ready.iter().all(|r| *r) {
            if let Some(i) = procs.iter_mut().position(|p| p.exited().is_some()) {
                panic!(
                    "round {round}: process {i} exited while starting\n{}",
                    report(&mut procs)
                );
            }
            for (i, p) in procs.iter().enumerate() {
                if !ready[i] {
                    ready[i] = http
                        .get(format!("http://127.0.0.1:{}/readyz", p.port))
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await
                        .is_ok_and(|r| r.status() == 200);
                }
            }
            assert!(
                Instant::now() < until,
                "round {round}: not every process became ready within 60s: {ready:?}\n{}",
                report(&mut procs)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // Exactly one process generated the admin token (a field of its log), and every process
        // accepts it. Its logs are JSON lines and nothing else; its stdout is empty.
        let printed: Vec<String> = procs
            .iter()
            .filter_map(|p| {
                let err = p.stderr_so_far();
                let lines: Vec<serde_json::Value> = err
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
                    .collect();
                lines
                    .iter()
                    .find_map(|l| l["fields"]["admin_token"].as_str())
                    .map(str::to_owned)
            })
            .collect();
        for p in &procs {
            let out = p.stdout_so_far();
            assert!(out.is_empty(), "a stray line on stdout: {out}");
        }
        assert_eq!(
            printed.len(),
            1,
            "round {round}: expected one generated admin token, got {printed:?}\n{}",
            report(&mut procs)
        );
        for p in &procs {
            let r = http
                .get(format!("http://127.0.0.1:{}/v1/tenants", p.port))
                .bearer_auth(&printed[0])
                .send()
                .await
                .expect("list tenants");
            assert_eq!(
                r.status(),
                200,
                "round {round}: port {} refuses the fleet's admin token",
                p.port
            );
        }
        for (i, p) in procs.iter_mut().enumerate() {
            assert!(p.exited().is_none(), "round {round}: process {i} exited");
        }
    }
}
