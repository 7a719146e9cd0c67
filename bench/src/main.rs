//! ringlog-bench: a thread-per-core load generator for Kafka-API brokers.
//!
//! Invariants:
//! - Exit status 0 only when every run finished without a broker or connection error;
//!   1 when a run counted errors; 2 when it could not run at all.

mod broker_cpu;
mod cli;
mod consume;
mod cores;
mod e2e;
mod encode;
mod kafka;
mod matrix;
#[cfg(test)]
mod mock;
mod pacing;
mod plot;
mod produce;
mod report;

use clap::Parser;

use cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Produce(args) => produce::run(
            &args.common.bootstrap_server,
            &args.common.topic,
            &args.common.topic_spec(),
            args.common.cores,
            &args.load,
            args.dry_run,
        )
        .and_then(|o| produce::print(&o.summary, args.common.json)),
        Command::Matrix(args) => matrix::run(&args, &report::command_line()).and_then(|m| {
            if args.common.json {
                println!("{}", report::to_json(&m)?);
            } else {
                print!(
                    "{}",
                    std::fs::read_to_string(args.output.join("table.txt"))?
                );
            }
            Ok(m.runs.iter().all(|r| r.ok()))
        }),
        Command::Consume(args) => {
            consume::run(&args).and_then(|s| produce::print(&s, args.common.json))
        }
        Command::E2e(args) => e2e::run(&args).and_then(|s| produce::print(&s, args.common.json)),
        Command::Plot(args) => plot::run(&args).map(|()| true),
    };
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("ringlog-bench: {e:#}");
            std::process::exit(2);
        }
    }
}
