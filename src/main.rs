//! The `sluice` binary: parse the command line and hand over to the library.

#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use sluice::cli::{
    BenchArgs, Cli, Command, GrantSenderArgs, MigrateArgs, ReceiveArgs, ServeArgs, SizeArgs,
};
use sluice::config::{Config, RawSettings};
use sluice::sizing::{SizeRequest, Surge, WaitTarget};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Size(args) => size(args),
        Command::Receive(args) => with_runtime(receive(args)),
        Command::Plan(args) => with_runtime(sluice::plan::run(args)),
        Command::Bench(args) => bench(args),
        Command::Serve(args) => with_runtime(serve(*args)),
        Command::Migrate(args) => with_runtime(migrate(args)),
        Command::GrantSender(args) => with_runtime(grant_sender(args)),
    }
}

/// Set once the JSON log format is in force: from then on even the last error is a JSON line.
static JSON_LOGS: AtomicBool = AtomicBool::new(false);

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
        Err(e) if JSON_LOGS.load(Ordering::Acquire) => {
            tracing::error!(error = %format!("{e:#}"), "sluice stopped");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The settings of `sluice serve`: flags and environment over the file over the defaults.
fn raw_settings(args: ServeArgs) -> anyhow::Result<RawSettings> {
    let file = match &args.config {
        Some(path) => RawSettings::from_toml_file(path)?,
        None => RawSettings::default(),
    };
    Ok(args.settings.or(file))
}

/// Logs go to stderr, as text (coloured only on a terminal, and never with `NO_COLOR`) or as
/// one JSON object per line; `SLUICE_LOG` sets the level and targets (default `info`).
fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour && !json);
    if json {
        builder.json().init();
        JSON_LOGS.store(true, Ordering::Release);
    } else {
        builder.init();
    }
    // A panic is one log line in the chosen format (its backtrace as a field only when
    // RUST_BACKTRACE asks for one), not raw text beside the JSON; the API answers it 500.
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic without a message");
        let location = info.location().map(ToString::to_string).unwrap_or_default();
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            tracing::error!(target: "sluice::panic", %location, %backtrace, "panic: {message}");
        } else {
            tracing::error!(target: "sluice::panic", %location, "panic: {message}");
        }
    }));
}

fn store_name(database_url: Option<&str>, data_dir: &std::path::Path) -> String {
    match database_url {
        Some(url) => redact(url),
        None => format!("sqlite {}", data_dir.join("sluice.db").display()),
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let raw = raw_settings(args)?;
    // The format is known before the rest is checked, so even a refused configuration is
    // reported in it.
    init_logging(raw.log_format.as_deref() == Some("json"));
    let config: Config = raw.validate()?;
    let store = store_name(config.database_url.as_deref(), &config.data_dir);
    let role = config.role;
    let running = sluice::serve::start(config).await?;
    match running.addr {
        Some(addr) => tracing::info!(%addr, ?role, %store, "sluice listening on http://{addr}"),
        None => tracing::info!(?role, %store, "sluice dispatcher running"),
    }
    if let Some(addr) = running.operator_addr {
        tracing::info!(%addr, "operator routes (/metrics, /healthz, /readyz) on http://{addr}");
    }
    if let Some(token) = &running.generated_admin_token {
        tracing::warn!(
            admin_token = %token,
            "generated an admin token, shown only now and stored hashed: keep it, or set \
             SLUICE_ADMIN_TOKEN to choose one"
        );
    }
    shutdown_signal().await;
    let report = running.stop().await;
    tracing::info!(
        finished = report.finished,
        released = report.released,
        "stopped: in-flight attempts finished, the rest released for redelivery"
    );
    Ok(())
}

/// `sluice migrate`: open the store (which migrates it) and say which; with
/// `--move-to-schema`, first move an installation out of `public`.
async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(path) => RawSettings::from_toml_file(path)?,
        None => RawSettings::default(),
    };
    let database_url = args.database_url.or(file.database_url);
    let schema = args
        .database_schema
        .or(file.database_schema)
        .unwrap_or_else(|| sluice::store::postgres::DEFAULT_SCHEMA.to_owned());
    let data_dir = args
        .data_dir
        .or(file.data_dir)
        .unwrap_or_else(|| "sluice-data".into());
    sluice::delivery::install_tls_provider();
    if args.move_to_schema {
        let url = database_url
            .as_deref()
            .filter(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
            .ok_or_else(|| {
                anyhow::anyhow!("--move-to-schema needs a postgres:// --database-url")
            })?;
        let mut client = connect_plain(url).await?;
        let moved = sluice::store::postgres::schema::move_from_public(&mut client, &schema)
            .await
            .map_err(sluice::serve::StartError::from)?;
        println!(
            "moved into schema {schema}: tables {}; functions {}",
            moved.tables.join(", "),
            moved.functions.join(", ")
        );
    }
    let mut options = sluice::store::OpenOptions::default();
    options.postgres.schema = schema;
    sluice::store::open(database_url.as_deref(), &data_dir, options)
        .await
        .map_err(sluice::serve::StartError::from)?;
    println!(
        "store migrated: {}",
        store_name(database_url.as_deref(), &data_dir)
    );
    Ok(())
}

/// `sluice grant-sender ROLE`: grant (or print) what lets ROLE call `send_message` only.
async fn grant_sender(args: GrantSenderArgs) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(path) => RawSettings::from_toml_file(path)?,
        None => RawSettings::default(),
    };
    let schema = args
        .database_schema
        .or(file.database_schema)
        .unwrap_or_else(|| sluice::store::postgres::DEFAULT_SCHEMA.to_owned());
    if let Some(valid) = sluice::store::postgres::schema_problem(&schema) {
        anyhow::bail!("database-schema: {schema:?} must be {valid}");
    }
    let sql = sluice::store::postgres::schema::sender_grants(&schema, &args.role);
    if args.print {
        print!("{sql}");
        return Ok(());
    }
    let url = args
        .database_url
        .or(file.database_url)
        .ok_or_else(|| anyhow::anyhow!("grant-sender needs --database-url (or --print)"))?;
    let client = connect_plain(&url).await?;
    client
        .batch_execute(&sql)
        .await
        .map_err(|e| match e.as_db_error() {
            Some(db) => anyhow::anyhow!("cannot grant: {} ({})", db.message(), db.code().code()),
            None => anyhow::anyhow!("cannot grant: {e}"),
        })?;
    println!(
        "role {} may call {schema}.send_message, and read or write none of sluice's tables",
        args.role
    );
    Ok(())
}

/// One plain connection for a one-off command, its connection driven in the background.
async fn connect_plain(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", redact(url)))?;
    tokio::spawn(connection);
    Ok(client)
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

/// `sluice bench …` runs `sluice-bench` (built beside this binary by `cargo build --release
/// --workspace`, or found on PATH) with the same arguments: the benchmarks, their charts and
/// their receivers are not part of the server.
fn bench(args: BenchArgs) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("sluice-bench")))
        .filter(|path| path.is_file());
    let program = beside.unwrap_or_else(|| "sluice-bench".into());
    let mut command = std::process::Command::new(&program);
    command.args(&args.args);
    #[cfg(unix)]
    let error = {
        use std::os::unix::process::CommandExt;
        command.exec()
    };
    #[cfg(not(unix))]
    let error = match command.status() {
        Ok(status) => return ExitCode::from(status.code().unwrap_or(1) as u8),
        Err(e) => e,
    };
    eprintln!(
        "error: cannot run {}: {error}\n`sluice bench` runs the separate sluice-bench binary: build it \
         with `cargo build --release -p sluice-bench` (it lands beside this one) or run \
         `cargo run --release -p sluice-bench -- <scenario>`",
        program.display()
    );
    ExitCode::FAILURE
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
    use sluice::demo_receiver::{Check, brokers};
    let check = match (&args.secret, &args.public_key) {
        (Some(secret), _) => Check::Secret(
            sluice::signing::Secret::parse(secret).map_err(|e| anyhow::anyhow!("--secret: {e}"))?,
        ),
        (None, Some(key)) if key.starts_with("whpk_") => Check::PublicKey(key.clone()),
        (None, Some(_)) => anyhow::bail!("--public-key: an endpoint's public key is whpk_…"),
        (None, None) => Check::Nothing,
    };
    match &args.from {
        Some(url) => {
            let name = [&args.queue, &args.subject, &args.stream]
                .into_iter()
                .find_map(|n| n.as_deref())
                .unwrap_or_default();
            let source = brokers::Source::parse(url, name).map_err(anyhow::Error::msg)?;
            brokers::print_forever(&source, check).await
        }
        None => Ok(sluice::demo_receiver::print_forever(args.listen, check).await?),
    }
}
