//! `run` and `serve`, the long-running commands: what they share beyond the one-shot commands
//! (the web server, the control socket, SIGHUP reloads, change notifications) lives here.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use tributary::control;
use tributary::fetch::Fetcher;
use tributary::harvest;

use super::Global;
use super::common::{load, load_config, open_store};
use super::runtime::{harvest_runtime, shutdown_requests, start_simulators, stopped};

pub(super) fn run_service(global: &Global) -> anyhow::Result<ExitCode> {
    let config = load_config(global, &[])?;
    let rt = harvest_runtime(&config)?;
    let stop = shutdown_requests(&rt)?;
    let (store, fetcher) = load(&config, &[])?;
    let web = tributary::web::WebState::from_config(&config, &store, &fetcher)?;
    log_oai(&web);
    let (web, notifications) = with_push(web, &config)?;
    // Hubs call back on the same listener; the web server serves the routes without knowing
    // the harvester.
    let subscriber = harvest::Push::new(&config, &store, &fetcher);
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.aggregator.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.aggregator.listen))?;
        let control = control_socket(&config);
        let simulators = start_simulators(&config).await?;
        let (harvester, runner) =
            harvest::Harvester::start(&config, &store, &fetcher, Some(&subscriber), stopped(stop.clone())).await?;
        let service = Arc::new(control::Service::new(
            &config,
            &store,
            &fetcher,
            &web,
            Some(harvester),
            tokio::runtime::Handle::current(),
            reload_from(global),
        ));
        reload_on_hangup(service.clone())?;
        tracing::info!(url = %config.aggregator.base_url, "serving the aggregate; the dashboard is at this URL");
        // One signal listener for all, so a Ctrl-C is received and logged once.
        let (server, harvester, notifier, ()) = tokio::join!(
            tributary::web::serve_with(listener, web, subscriber.router(), stopped(stop.clone())),
            runner.run(),
            notify(notifications, stopped(stop.clone())),
            serve_control(control, service, stopped(stop)),
        );
        // Upstreams stop last: the harvester may still be finishing a fetch from them.
        simulators.stop().await;
        server.context("web server")?;
        harvester?;
        notifier.context("change notifications")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The control socket in the data directory. A file system that cannot hold one (some FUSE
/// and network file systems) does not stop the service: it runs without, and says so, and the
/// commands then find the store in use.
fn control_socket(config: &tributary::config::Config) -> Option<control::ControlSocket> {
    match control::ControlSocket::bind(&config.aggregator.data_dir) {
        Ok(socket) => {
            tracing::info!(path = %socket.path().display(), "control socket: the CLI's commands reach this service");
            Some(socket)
        }
        Err(e) => {
            tracing::error!(error = %tributary::error::chain(&e), "no control socket: running without; poll, pause, resume, reload and the store's commands cannot reach this service (SIGHUP still reloads)");
            None
        }
    }
}

/// Serves the control socket, when there is one, until `shutdown`.
async fn serve_control(
    socket: Option<control::ControlSocket>,
    service: Arc<control::Service>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    if let Some(socket) = socket {
        socket.serve(service, shutdown).await;
    }
}

/// Where a reload reads the configuration again: the file, `--data-dir` and `--shard` the
/// service started with.
fn reload_from(global: &Global) -> control::ReloadFrom {
    control::ReloadFrom { path: global.config.clone(), data_dir: global.data_dir.clone(), shard: global.shard.clone() }
}

/// SIGHUP reloads the configuration, as `tributary reload` does; the outcome is logged.
fn reload_on_hangup(service: Arc<control::Service>) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        // Ends with the runtime; each turn is one SIGHUP.
        while hup.recv().await.is_some() {
            let service = service.clone();
            match tokio::task::spawn_blocking(move || service.reload()).await {
                Ok(Ok(report)) => tracing::info!(report = %report, "SIGHUP: configuration reloaded"),
                Ok(Err(e)) => {
                    tracing::error!(error = %tributary::error::chain(&e), "SIGHUP: the configuration was not reloaded; the one in force stays")
                }
                Err(e) => tracing::error!(error = %e, "SIGHUP: the reload failed"),
            }
        }
    });
    Ok(())
}

/// The web state with change notifications, unless `[hub] enabled = false`.
fn with_push(
    web: tributary::web::WebState,
    config: &tributary::config::Config,
) -> anyhow::Result<(tributary::web::WebState, Option<tributary::notify::Push>)> {
    let push = tributary::notify::Push::from_config(web.publisher().clone(), config)?;
    Ok(match push {
        Some(p) => (web.with_push(p.clone()), Some(p)),
        None => (web, None),
    })
}

/// Runs the notifier until shutdown (nothing when notifications are off).
async fn notify(
    push: Option<tributary::notify::Push>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tributary::notify::NotifyError> {
    match push {
        Some(p) => p.run(shutdown).await,
        None => Ok(()),
    }
}

/// Says once where the OAI-PMH endpoint is, or why there is none.
fn log_oai(web: &tributary::web::WebState) {
    match web.oai() {
        Some(oai) => tracing::info!(url = %oai.base_url(), "serving OAI-PMH"),
        None => tracing::info!("OAI-PMH endpoint off: set oai_name and oai_admin_email in [aggregator] to serve it"),
    }
}

pub(super) fn run_serve(global: &Global) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    let stop = shutdown_requests(&rt)?;
    let config = load_config(global, &[])?;
    let store = open_store(&config)?;
    let fetcher = Fetcher::from_config(&config)?;
    harvest::honour_parks(&store, &fetcher)?;
    let web = tributary::web::WebState::from_config(&config, &store, &fetcher)?;
    log_oai(&web);
    let (web, push) = with_push(web, &config)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.aggregator.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.aggregator.listen))?;
        let control = control_socket(&config);
        let handle = tokio::runtime::Handle::current();
        let service =
            Arc::new(control::Service::new(&config, &store, &fetcher, &web, None, handle, reload_from(global)));
        reload_on_hangup(service.clone())?;
        tracing::info!(url = %config.aggregator.base_url, "serving the aggregate");
        let (server, notifier, ()) = tokio::join!(
            tributary::web::serve(listener, web, stopped(stop.clone())),
            notify(push, stopped(stop.clone())),
            serve_control(control, service, stopped(stop)),
        );
        notifier.context("change notifications")?;
        server.context("web server")
    })?;
    Ok(ExitCode::SUCCESS)
}
