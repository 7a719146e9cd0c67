#![allow(dead_code)]
mod encode;
fn main() {}
