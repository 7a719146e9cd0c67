//! Column-aligned text tables, as kafka-consumer-groups prints them.
//!
//! Invariants:
//! - Every row has as many cells as the header (checked when added).
//! - Columns are left-aligned and separated by at least two spaces; the last column is not
//!   padded, so lines carry no trailing blanks.

use std::io::Write;

use anyhow::Result;

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.header.len(),
            "a row has one cell per column"
        );
        self.rows.push(cells);
    }

    pub fn write(&self, out: &mut impl Write) -> Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let last = row.len() - 1;
            for (i, cell) in row.iter().enumerate() {
                if i == last {
                    writeln!(out, "{cell}")?;
                } else {
                    write!(out, "{cell:<width$}  ", width = widths[i])?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_without_trailing_blanks() {
        let mut table = Table::new(&["GROUP", "LAG"]);
        table.row(vec!["a-long-group".into(), "0".into()]);
        table.row(vec!["g".into(), "12".into()]);
        let mut out = Vec::new();
        table.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GROUP         LAG\na-long-group  0\ng             12\n"
        );
    }
}
