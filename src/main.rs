//! The `sluice` binary: parse the command line and hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use sluice::cli::{Cli, Command, ReceiveArgs, ServeArgs, SizeArgs};
use sluice::config::{Config, RawSettings};
use sluice::sizing::{SizeRequest, Surge, WaitTarget};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Size(args) => size(args),
        Command::Receive(args) => with_runtime(receive(args)),
        Command::Plan(args) => with_runtime(sluice::plan::run(args)),
        Command::Bench(args) => with_runtime(sluice::bench::run(args)),
        Command::Serve(args) => with_runtime(serve(args, false)),
        Command::Migrate(args) => with_runtime(serve(args, true)),
    }
}

fn with_runtime(f: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(args: ServeArgs) -> anyhow::Result<Config> {
    let file = match &args.config {
        Some(path) => RawSettings::from_toml_file(path)?,
        None => RawSettings::default(),
    };
    Ok(args.settings.or(file).validate()?)
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn serve(args: ServeArgs, migrate_only: bool) -> anyhow::Result<()> {
    let config = load_config(args)?;
    init_logging(config.log_json);
    let store_name = match &config.database_url {
        Some(url) => redact(url),
        None => format!("sqlite {}", config.data_dir.join("sluice.db").display()),
    };
    if migrate_only {
        let _ = rustls::crypto::ring::default_provider().install_default();
        sluice::store::open(
            config.database_url.as_deref(),
            &config.data_dir,
            Default::default(),
        )
        .await?;
        println!("store migrated: {store_name}");
        return Ok(());
    }
    let role = config.role;
    let running = sluice::server::start(config).await?;
    if let Some(addr) = running.addr {
        println!("sluice listening on http://{addr} (role {role:?}, store {store_name})");
    } else {
        println!("sluice dispatcher running (store {store_name})");
    }
    if let Some(token) = &running.generated_admin_token {
        println!("admin token (shown once, stored hashed): {token}");
    }
    shutdown_signal().await;
    let report = running.stop().await;
    eprintln!(
        "stopped: {} in-flight attempts finished, {} released for redelivery",
        report.finished, report.released
    );
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "database".into(),
    }
}

fn size(args: SizeArgs) -> ExitCode {
    let target = match args.percentile {
        Some(p) => WaitTarget::Percentile {
            quantile: p / 100.0,
            wait_s: args.target_wait,
        },
        None => WaitTarget::Mean {
            wait_s: args.target_wait,
        },
    };
    let mut request = SizeRequest::new(args.rate, args.service_time, target);
    request.beta = args.beta;
    request.tasks_per_process = args.tasks_per_process;
    request.processes_per_pod = args.processes_per_pod;
    if let (Some(rate_per_s), Some(service_time_s)) = (args.surge_rate, args.surge_service_time) {
        request.surge = Some(Surge {
            rate_per_s,
            service_time_s,
        });
    }
    match sluice::sizing::size(&request) {
        Ok(report) if args.json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn receive(args: ReceiveArgs) -> anyhow::Result<()> {
    let secret = args
        .secret
        .as_deref()
        .map(sluice::signing::Secret::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--secret: {e}"))?;
    sluice::receivers::print_forever(args.listen, secret).await?;
    Ok(())
}
