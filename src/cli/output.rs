//! What client and operator commands print on stdout: a table for people,
//! JSON for programs (`-o table|json`). Without `-o`, a terminal gets the
//! table and a pipe or file gets JSON, so scripts keep reading the JSON they
//! always read.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::Value;

/// `-o` / `--output`.
#[derive(Args, Clone, Copy)]
pub struct OutputArg {
    /// Output: table (aligned columns) or json. Default: table on a terminal, json otherwise.
    #[arg(short = 'o', long = "output", global = true, value_enum)]
    output: Option<Format>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

impl OutputArg {
    fn format(self) -> Format {
        self.output.unwrap_or(if std::io::stdout().is_terminal() { Format::Table } else { Format::Json })
    }

    /// Prints `value` in the chosen format.
    pub fn print<T: Serialize>(self, value: &T) -> Result<()> {
        let text = match self.format() {
            Format::Json => serde_json::to_string_pretty(value)?,
            Format::Table => table(&serde_json::to_value(value)?),
        };
        write_stdout(format!("{text}\n").as_bytes())
    }
}

/// Writes `bytes` to stdout. A closed stdout (`leasehold list | head`) is
/// not an error.
pub fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Columns shown first when present, in this order: what a row is about.
/// The others follow alphabetically (serde_json's maps are sorted).
const LEADING: [&str; 8] = ["name", "lock", "key", "resource", "id", "endpoint", "owner", "token"];

/// `value` as a table: an array of objects gives a row per element, an
/// object one row; a column per key. Anything else prints as it is.
fn table(value: &Value) -> String {
    let rows: Vec<&serde_json::Map<String, Value>> = match value {
        Value::Array(items) if items.is_empty() => return "(none)".to_string(),
        Value::Array(items) => match items.iter().map(Value::as_object).collect::<Option<Vec<_>>>() {
            Some(rows) => rows,
            None => return items.iter().map(cell).collect::<Vec<_>>().join("\n"),
        },
        Value::Object(row) => vec![row],
        other => return cell(other),
    };
    let mut columns: Vec<&str> = LEADING.into_iter().filter(|c| rows.iter().any(|r| r.contains_key(*c))).collect();
    for row in &rows {
        for key in row.keys() {
            if !columns.contains(&key.as_str()) {
                columns.push(key);
            }
        }
    }
    let leading = LEADING.iter().filter(|c| columns.contains(c)).count();
    columns[leading..].sort_unstable();
    let mut lines: Vec<Vec<String>> = vec![columns.iter().map(|c| c.to_uppercase()).collect()];
    for row in &rows {
        lines.push(columns.iter().map(|c| row.get(*c).map_or_else(String::new, cell)).collect());
    }
    let widths: Vec<usize> =
        (0..columns.len()).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    lines
        .iter()
        .map(|line| {
            let padded: Vec<String> = line.iter().zip(&widths).map(|(text, width)| format!("{text:<width$}")).collect();
            padded.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One value in a cell: strings without quotes, `-` for null, a list of
/// objects (a lock's waiters) as its length, other nesting as compact JSON.
fn cell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        Value::Array(items) if items.iter().all(Value::is_object) => items.len().to_string(),
        Value::Array(items) if items.iter().all(|v| !v.is_object() && !v.is_array()) => {
            items.iter().map(cell).collect::<Vec<_>>().join(",")
        }
        Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures a list becomes aligned columns, leading with what a row is
    // about, with nulls, nesting and missing keys shown readably.
    #[test]
    fn rows_are_aligned_with_leading_columns() {
        let list = serde_json::json!([
            { "token": 7, "name": "orders/1", "owner": "alice", "waiters": [{ "owner": "bob" }], "request_id": null },
            { "token": 12, "name": "b", "owner": "carol-the-second", "waiters": [] },
        ]);
        let expected = "\
NAME      OWNER             TOKEN  REQUEST_ID  WAITERS
orders/1  alice             7      -           1
b         carol-the-second  12                 0";
        assert_eq!(table(&list), expected);
    }

    // Ensures a single object is one row and an empty list says so.
    #[test]
    fn an_object_is_one_row_and_nothing_is_none() {
        let released = serde_json::json!({ "released": true, "name": "x", "token": 3 });
        assert_eq!(table(&released), "NAME  TOKEN  RELEASED\nx     3      true");
        assert_eq!(table(&serde_json::json!([])), "(none)");
    }
}
