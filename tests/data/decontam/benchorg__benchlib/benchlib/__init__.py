from benchlib.core import Table
