//! `matrix`: acks × message size, each run on a fresh topic, written to a report folder:
//! table.txt, results.json, one .hgrm per run, one latency plot (SVG and PNG) per acks setting.
//!
//! Invariants:
//! - Every run produces to its own new topic (`<topic>-<size>b-acks<acks>-<run id>`), so the
//!   topic's log end offsets after the run count exactly the messages the broker took, and
//!   results.json records them beside `sent` and `acked`. The topic is deleted once counted
//!   (unless --keep-topics), so a matrix needs the disk space of one run, not of all.
//! - Every file of the folder starts with (or, for JSON, holds) the exact command, broker
//!   address, cores, kernel and date.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{acks_name, MatrixArgs};
use crate::cores;
use crate::kafka;
use crate::plot::{self, Series};
use crate::produce;
use crate::report::{self, Environment, MatrixReport, Summary};
use client::error::codes::UNKNOWN_TOPIC_OR_PARTITION;

pub fn run(args: &MatrixArgs, command: &str) -> Result<MatrixReport> {
    let out = &args.output;
    if args.load.request_log.is_some() {
        anyhow::bail!("--request-log is for produce runs");
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let broker = if args.broker_label.is_empty() {
        args.common.bootstrap_server.clone()
    } else {
        format!("{} ({})", args.broker_label, args.common.bootstrap_server)
    };
    let env = Environment::capture(&broker, command);
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut runs: Vec<Summary> = Vec::new();
    let mut hgrms: Vec<(i16, usize, String)> = Vec::new();
    for &size in &args.sizes {
        for &acks in &args.acks_list {
            let mut load = args.load.clone();
            load.acks = acks;
            load.message_size = size;
            let topic = format!(
                "{}-{size}b-acks{}-{run_id}",
                args.common.topic,
                acks_name(acks)
            );
            eprintln!(
                "matrix: acks={} size={size} B topic {topic}",
                acks_name(acks)
            );
            let outcome = match produce::run(
                &args.common.bootstrap_server,
                &topic,
                &args.common.topic_spec(),
                args.common.cores,
                &load,
                false,
            ) {
                Ok(o) => o,
                Err(e) => {
                    // Keep going: the report shows the failed run instead of losing the others.
                    eprintln!("matrix: acks={} size={size}: {e:#}", acks_name(acks));
                    let mut summary = Summary {
                        mode: "produce".to_string(),
                        topic: topic.clone(),
                        acks: acks_name(acks),
                        message_bytes: size,
                        ..Summary::default()
                    };
                    summary.errors.insert("RUN_FAILED".to_string(), 1);
                    produce::Outcome {
                        summary,
                        hist: report::new_histogram(),
                    }
                }
            };
            eprint!("{}", outcome.summary.text());
            if !args.keep_topics {
                if let Err(e) = delete_topic(&args.common.bootstrap_server, &topic) {
                    eprintln!("matrix: topic {topic} kept: {e:#}");
                }
            }
            let hgrm = format!("{}{}", env.header(), report::hgrm(&outcome.hist));
            let name = format!("acks{}-{size}b.hgrm", acks_name(acks));
            std::fs::write(out.join(&name), &hgrm)?;
            hgrms.push((acks, size, hgrm));
            runs.push(outcome.summary);
        }
    }
    std::fs::write(out.join("table.txt"), report::table(&env, &runs))?;
    let matrix = MatrixReport {
        environment: env,
        runs,
    };
    std::fs::write(out.join("results.json"), report::to_json(&matrix)?)?;
    for &acks in &args.acks_list {
        write_plot(out, acks, &hgrms, &matrix.environment)?;
    }
    Ok(matrix)
}

fn delete_topic(bootstrap: &str, topic: &str) -> Result<()> {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    cores::run_local(async move {
        let mut cluster = kafka::cluster(&bootstrap).await?;
        match client::admin::delete_topic(&mut cluster, &topic).await {
            // Nothing left to delete.
            Err(e) if client::code_of(&e) == Some(UNKNOWN_TOPIC_OR_PARTITION) => Ok(()),
            other => other,
        }
    })?
}

fn write_plot(
    out: &Path,
    acks: i16,
    hgrms: &[(i16, usize, String)],
    env: &Environment,
) -> Result<()> {
    let series: Vec<Series> = hgrms
        .iter()
        .filter(|(a, _, _)| *a == acks)
        .map(|(_, size, text)| Series {
            label: format!("{size} B messages"),
            points: report::parse_hgrm(text),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let title = if series.is_empty() {
        format!("acks={}: no latency (no acknowledgements)", acks_name(acks))
    } else {
        format!("acks={}: produce latency by percentile", acks_name(acks))
    };
    // ASCII only: the PNG's built-in font has no other glyphs.
    let subtitle = format!("{}; {} cores; {}", env.broker, env.cores, env.date_utc);
    let name = format!("latency-acks{}", acks_name(acks));
    plot::latency_svg(&out.join(format!("{name}.svg")), &title, &subtitle, &series)?;
    plot::latency_png(&out.join(format!("{name}.png")), &title, &subtitle, &series)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn matrix_writes_a_complete_report_against_a_broker() {
        let _executors = crate::cores::executor_test_lock();
        let broker = crate::mock::MockBroker::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let addr = broker.addr.to_string();
        let words = [
            "ringlog-bench",
            "matrix",
            "--bootstrap-server",
            &addr,
            "--output",
            dir.path().to_str().expect("utf-8 temp path"),
            "--messages",
            "3000",
            "--warmup",
            "0s",
            "--sizes",
            "100,1024",
            "--partitions",
            "2",
        ];
        let cli = crate::cli::Cli::try_parse_from(words).expect("parses");
        let crate::cli::Command::Matrix(args) = cli.command else {
            panic!("matrix")
        };
        let report = run(&args, &words.join(" ")).expect("runs");
        assert_eq!(report.runs.len(), 6);
        for r in &report.runs {
            assert!(r.ok(), "{:?}", r.errors);
            assert_eq!(r.sent, 3_000);
            assert_eq!(r.log_end_offset_total, Some(3_000));
            if r.acks != "0" {
                assert_eq!(r.acked, 3_000);
            }
        }
        for f in [
            "table.txt",
            "results.json",
            "acks1-100b.hgrm",
            "acksall-1024b.hgrm",
            "latency-acks0.svg",
            "latency-acks1.svg",
            "latency-acksall.svg",
            "latency-acks1.png",
            "latency-acksall.png",
        ] {
            let bytes = std::fs::read(dir.path().join(f)).expect(f);
            assert!(!bytes.is_empty(), "{f}");
        }
        let json = std::fs::read_to_string(dir.path().join("results.json")).expect("json");
        let back: MatrixReport = serde_json::from_str(&json).expect("parses");
        assert_eq!(back.runs.len(), 6);
        assert!(back.environment.command.contains("matrix"));
        let table = std::fs::read_to_string(dir.path().join("table.txt")).expect("table");
        assert!(table.contains("# broker: ") && table.contains("p99.9"));
    }
}
