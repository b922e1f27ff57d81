//! Columns aligned as kubectl aligns them (three spaces between columns, no trailing spaces).

/// Rows of cells, the first row the header.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Table {
        Table { rows: vec![headers.into_iter().map(Into::into).collect()] }
    }

    /// Add a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The table as text, each line starting with `indent`.
    pub fn render(&self, indent: &str) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| self.rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::from(indent);
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 3));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(["NAME", "PHASE", "URL"]);
        t.row(["pr-1", "Ready", "https://a"]);
        t.row(["pr-10000", "Pending", ""]);
        assert_eq!(t.render(""), "NAME       PHASE     URL\npr-1       Ready     https://a\npr-10000   Pending\n");
    }

    #[test]
    fn aligns_columns_and_keeps_empty_cells() {
        let mut t = Table::new(["NAME", "ATTENTION", "AGE"]);
        t.row(["a", "", "5s"]);
        t.row(["bb", "Boot failed", "10m"]);
        assert_eq!(t.render(""), "NAME   ATTENTION     AGE\na                    5s\nbb     Boot failed   10m\n");
    }

    #[test]
    fn indents_every_line() {
        let mut t = Table::new(["TYPE", "REASON"]);
        t.row(["Normal", "Started"]);
        assert_eq!(t.render("  "), "  TYPE     REASON\n  Normal   Started\n");
    }
}
