"""Tables of records: columns are inferred from the first record unless given."""

from benchlib.util import as_text, widths


class Table:
    def __init__(self, rows, columns=None):
        self.rows = list(rows)
        if columns is None:
            columns = list(self.rows[0]) if self.rows else []
        self.columns = list(columns)

    def cells(self):
        for row in self.rows:
            yield [as_text(row.get(c)) for c in self.columns]

    def column_widths(self):
        return widths([self.columns] + list(self.cells()))

    def sort_by(self, column, reverse=False):
        self.rows.sort(key=lambda r: (r.get(column) is None, r.get(column)), reverse=reverse)
        return self
