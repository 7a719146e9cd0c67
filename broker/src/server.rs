//! Start-up and shutdown of a node: lock the data directory, bind the listening socket, load
//! metadata, replay the stage (`storage::stage`: direct-mode writes a crash cut short), start
//! one shard per core, each with its stage, open each shard's partitions (recovering them), then
//! accept on shard 0 and deal connections to every shard ([`crate::listener`]); on SIGINT or
//! SIGTERM stop accepting, flush and close every log.
//!
//! Invariants: no connection is served before every shard has opened its partitions (a
//! request routed to a shard still recovering would see its partition missing); "ready" is
//! logged only then, with the address, so a harness waiting for it never talks to a node that
//! is still starting; the data directory is locked (`.lock`, flock) so two nodes never write
//! one log, and the listening socket is the node's own, so two nodes never share a port.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::{Arc, Barrier, Mutex};

use anyhow::{bail, Context};
use net::ConnectionLimits;
use shard::{Job, Mesh, Router, ShardsConfig};

use crate::config::BrokerConfig;
use crate::controller::Controller;
use crate::metadata::{FileMetadataStore, MetadataImage, MetadataStore, QuorumMetadataStore};
use crate::quorum::wire::Hello;
use crate::quorum::{Membership, Quorum, QuorumConfig};
use crate::request::supported_apis;
use crate::shard_state::Shard;
use kafka_protocol::error::ResponseError;

/// Messages a shard's inbox holds before senders wait.
const INBOX_CAPACITY: usize = 1024;
/// Registered io memory per shard (locked memory is capped at 8 MiB per process here).
const IO_MEMORY_BYTES: usize = 1 << 20;
const RING_DEPTH: usize = 256;

/// Runs a node until SIGINT or SIGTERM: `shard_count` shards (one per CPU by default), each
/// pinned to its own CPU unless `pinned` is false (see `shard::ShardsConfig::pinned`).
pub fn run(
    mut config: BrokerConfig,
    shard_count: Option<usize>,
    pinned: bool,
) -> anyhow::Result<()> {
    // First of all: a SIGINT that arrives after the "starting" line must find the signals
    // blocked and waiting for the signal thread, not kill the process.
    let signals = block_shutdown_signals();
    let shard_count = shard_count.unwrap_or_else(|| shard::executor::online_cpus().len());
    crate::memory::keep_freed_memory_for_reuse();
    crate::memory::trim_periodically().context("starting the memory thread")?;
    std::fs::create_dir_all(&config.log_dir)
        .with_context(|| format!("creating log.dirs {}", config.log_dir.display()))?;
    // One absolute path for every log, whatever the working directory does later.
    config.log_dir = std::fs::canonicalize(&config.log_dir)
        .with_context(|| format!("resolving log.dirs {}", config.log_dir.display()))?;
    let _lock = lock_data_dir(&config)?;
    // Before any log opens: what a crash left in the stage goes into the segment files.
    let replayed = storage::stage::replay(&config.stage_dir, &config.log_dir)
        .context("replaying the stage")?;
    if replayed.chunks > 0 {
        tracing::info!(
            chunks = replayed.chunks,
            bytes = replayed.bytes,
            "replayed staged writes"
        );
    }
    // A node with no quorum voters is a quorum of itself: it formats its storage itself.
    // Voters of a quorum are formatted with one cluster id first (`ringlog format`).
    let formatted = crate::meta_properties::load_for_start(
        &config.log_dir,
        config.node_id,
        config.cluster_id.as_deref(),
        config.quorum_voters.is_empty(),
    )?;
    config.cluster_id = Some(formatted.cluster_id);
    config.directory_id = Some(formatted.directory_id);
    let listener = crate::listener::bind(&config.listener.host, config.listener.port)?;
    let port = listener.local_addr().context("listener address")?.port();
    // Port 0 asked the kernel for a port: it is known now, and clients are told it.
    if config.advertised.port == 0 {
        config.advertised.port = port;
    }
    config.listener.port = port;
    let quorum = start_quorum(&config)?;
    let store: Box<dyn MetadataStore + Send> = match &quorum {
        Some(quorum) => Box::new(QuorumMetadataStore::new(quorum.clone())),
        None => Box::new(FileMetadataStore::new(&config.log_dir, config.node_id)),
    };
    let controller = Controller::load(store)
        .context("loading metadata")?
        .serving(&config, quorum);
    // A new incarnation, fenced until every shard serves its partitions (`shard_main`).
    futures_lite::future::block_on(controller.register_local(&config)).map_err(|refusal| {
        anyhow::anyhow!("registering broker {}: {}", config.node_id, refusal.message)
    })?;
    let image = controller.image();
    tracing::info!(
        topics = image.topics.len(),
        shards = shard_count,
        pinned,
        dir = %config.log_dir.display(),
        "starting"
    );
    let endpoints = Mesh::endpoints::<Job<Shard>>(shard_count, INBOX_CAPACITY);
    let remote = endpoints[0].remote();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let signal = wait_for_signal(&signals);
            tracing::info!(signal, "shutting down");
            for target in 0..remote.shard_count() {
                let stop: Job<Shard> = Box::new(|shard: Rc<Shard>| {
                    Box::pin(async move { shard.stopping.notify_all() })
                });
                let _ = remote.send_blocking(target, stop);
            }
        })
        .context("starting the signal thread")?;

    // Start-up hand-off: each shard takes its own pieces once; never on a data path.
    let startup = Arc::new(Mutex::new(Startup {
        endpoints: endpoints.into_iter().map(Some).collect(),
        controller: Some(controller),
        listener: Some(listener),
    }));
    let ready = Arc::new(Barrier::new(shard_count));
    let config = Arc::new(config);
    let shards = ShardsConfig {
        shard_count,
        io_memory_bytes: IO_MEMORY_BYTES,
        ring_depth: RING_DEPTH,
        pinned,
    };
    let results = shard::run_shards(&shards, move |id| {
        let (endpoint, controller, listener) = {
            let mut startup = startup.lock().expect("start-up lock is never poisoned");
            let endpoint = startup.endpoints[id]
                .take()
                .expect("each shard starts once");
            if id == 0 {
                (endpoint, startup.controller.take(), startup.listener.take())
            } else {
                (endpoint, None, None)
            }
        };
        shard_main(
            Router::new(endpoint),
            config.clone(),
            (controller, listener),
            image.clone(),
            ready.clone(),
        )
    })?;
    for (id, result) in results.into_iter().enumerate() {
        result.with_context(|| format!("shard {id}"))?;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The voter of this node when `controller.quorum.voters` names several, listening on its
/// own controller listener; `None` for a one-voter node.
fn start_quorum(config: &BrokerConfig) -> anyhow::Result<Option<Arc<Quorum>>> {
    if config.quorum_voters.is_empty() {
        return Ok(None);
    }
    let address = config.quorum_voters[&config.node_id];
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("binding the controller listener {address}"))?;
    let membership = Membership {
        local: Hello {
            cluster_id: config.cluster_id.clone().unwrap_or_default(),
            node_id: config.node_id as u64,
            directory_id: config.directory_id.clone().unwrap_or_default(),
        },
        voters: config
            .quorum_voters
            .iter()
            .map(|(&id, &address)| (id as u64, address))
            .collect(),
    };
    let quorum_config = QuorumConfig {
        dir: config
            .log_dir
            .join(crate::metadata::METADATA_TOPIC)
            .join("raft"),
        membership,
        tick: crate::quorum::runner::TICK,
    };
    tracing::info!(%address, voters = config.quorum_voters.len(), "starting the metadata quorum");
    let quorum = Quorum::start(quorum_config, listener).context("starting the metadata quorum")?;
    Ok(Some(Arc::new(quorum)))
}

struct Startup {
    endpoints: Vec<Option<shard::Endpoint<Job<Shard>>>>,
    controller: Option<Controller>,
    listener: Option<std::net::TcpListener>,
}

/// What shard 0 alone runs: the controller, and the acceptor on the listening socket.
type ShardZero = (Option<Controller>, Option<std::net::TcpListener>);

async fn shard_main(
    router: Router<Shard>,
    config: Arc<BrokerConfig>,
    (controller, listener): ShardZero,
    image: Arc<MetadataImage>,
    ready: Arc<Barrier>,
) -> anyhow::Result<()> {
    let apis = Rc::new(supported_apis());
    if config.io_mode == storage::IoMode::Direct {
        let stage = storage::stage::install(
            &config.stage_dir,
            &config.log_dir,
            router.shard_id(),
            config.stage_bytes,
        )
        .context("installing the stage")?;
        if let Some(path) = stage {
            tracing::debug!(path = %path.display(), bytes = config.stage_bytes, "stage installed");
        }
    }
    let shard = Rc::new(Shard::new(router, config.clone(), apis.clone(), controller));
    // Read before the inbox runs: a shutdown that arrives while the shard is still starting
    // must not be missed by the accept loop below.
    let stopping = shard.stopping.generation();
    let inbox = glommio::spawn_local({
        let shard = shard.clone();
        async move { shard.router.serve(shard.clone()).await }
    })
    .detach();
    *shard.checkpointed_high_watermarks.borrow_mut() =
        crate::replication::checkpoint::read(&shard).await;
    let opened = shard.apply_image(image).await;
    // Wait for every shard even on failure, so no shard waits forever.
    ready.wait();
    opened.context("opening partitions")?;
    // In a quorum, shard 0 follows the metadata log (and serves forwarded requests) from
    // here on: unfencing below waits for the log to carry it back.
    let follower = shard
        .controller
        .is_some()
        .then(|| glommio::spawn_local(Controller::follow_forever(shard.clone())).detach());
    if shard.controller.is_some() {
        // Unfencing publishes the image to every shard, and a shard that a shutdown
        // stopped may be gone before it reads it: a stop ends the wait. A shard that is
        // stopping and still reads answers BROKER_NOT_AVAILABLE, which ends it too.
        let shutting_down = crate::errors::code(ResponseError::BrokerNotAvailable);
        let unfenced = async { Some(Controller::unfence_local(&shard).await) };
        let stop = async {
            shard.stopping.changed_since(stopping).await;
            None
        };
        match futures_lite::future::or(unfenced, stop).await {
            Some(Err(refusal)) if refusal.error_code != shutting_down => {
                anyhow::bail!("unfencing this broker: {}", refusal.message)
            }
            _ => {}
        }
    }
    let heartbeats = shard
        .controller
        .is_some()
        .then(|| glommio::spawn_local(Controller::heartbeat_forever(shard.clone())).detach());
    let flusher = glommio::spawn_local(flush_periodically(shard.clone())).detach();
    let fetchers = glommio::spawn_local(crate::replication::follow_forever(shard.clone())).detach();
    let isr = glommio::spawn_local(crate::replication::maintain_forever(shard.clone())).detach();
    let checkpoints = (shard.id() == 0).then(|| {
        let writer = crate::replication::checkpoint::write_forever(shard.clone());
        glommio::spawn_local(writer).detach()
    });
    let retention = glommio::spawn_local(crate::retention::enforce_forever(shard.clone())).detach();
    let cleaner = crate::cleaner::start(&shard).map(glommio::Task::detach);
    let expiry = glommio::spawn_local(crate::producers::expire_forever(shard.clone())).detach();
    let sweeper = glommio::spawn_local(crate::groups::GroupCoordinator::sweep_forever(
        shard.clone(),
    ))
    .detach();
    let stopped = shard.stopping.changed_since(stopping);
    match listener {
        Some(listener) => {
            let address = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            tracing::info!(address, shards = shard.router.shard_count(), "ready");
            crate::listener::accept_until(shard.clone(), listener, stopped, serve_connection).await;
        }
        None => stopped.await,
    }
    // No heartbeat may follow the controlled shutdown: it would say the broker is back.
    if let Some(heartbeats) = heartbeats {
        heartbeats.cancel();
    }
    if shard.controller.is_some() {
        Controller::shut_down_controlled(&shard).await;
    }
    if let Some(follower) = follower {
        follower.cancel();
    }
    flusher.cancel();
    fetchers.cancel();
    isr.cancel();
    if let Some(checkpoints) = checkpoints {
        checkpoints.cancel();
    }
    retention.cancel();
    if let Some(cleaner) = cleaner {
        cleaner.cancel();
    }
    expiry.cancel();
    sweeper.cancel();
    shard.close().await;
    storage::stage::uninstall();
    inbox.cancel();
    // Another shard still running may call this one: it gets ShardStopped, not a hang.
    shard.router.close();
    Ok(())
}

/// Serves one client connection on the shard it was dealt to, until it ends.
async fn serve_connection(shard: Rc<Shard>, stream: glommio::net::TcpStream) {
    let limits = ConnectionLimits {
        request_bytes_max: shard.config.request_bytes_max,
        in_flight_max: shard.config.in_flight_requests_max,
        idle_timeout: shard.config.idle_timeout,
        write_timeout: shard.config.write_timeout,
        unsent_bytes_max: shard.config.unsent_bytes_max(),
    };
    let (apis, budget) = (shard.apis.clone(), shard.request_budget.clone());
    if let Err(error) = net::serve_connection(stream, shard, apis, limits, budget).await {
        tracing::debug!(%error, "connection ended");
    }
}

/// `log.flush.interval.ms`: makes acks=0/1 data durable in the background.
async fn flush_periodically(shard: Rc<Shard>) {
    loop {
        glommio::timer::sleep(shard.config.flush_interval).await;
        for partition in shard.owned_partitions() {
            partition.sync().await;
        }
    }
}

fn lock_data_dir(config: &BrokerConfig) -> anyhow::Result<File> {
    let path = config.log_dir.join(".lock");
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked != 0 {
        bail!(
            "{} is in use by another ringlog process",
            config.log_dir.display()
        );
    }
    Ok(file)
}

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts afterwards, so they
/// are received only by [`wait_for_signal`].
fn block_shutdown_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data that sigemptyset initialises; the calls only read and
    // write that set and this thread's signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut signal = 0;
    // SAFETY: `set` was initialised by block_shutdown_signals; `signal` is a valid out slot.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}
