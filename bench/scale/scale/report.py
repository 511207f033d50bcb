"""The measured rows and the table they make."""

from .procfs import log


class Rows:
    """(measure, value) pairs in the order measured; each is logged as it comes."""

    def __init__(self):
        self.rows = []

    def add(self, k, v):
        """Adds a row and logs it."""
        self.rows.append((k, v))
        log("%s: %s" % (k, v))

    def print_rows(self):
        """Every row, aligned."""
        for k, v in self.rows:
            print("%-44s %s" % (k, v))

    def print_table(self, files, rtt_ms):
        """The table: a header line, a rule, then every row."""
        print("\n%-44s %s" % ("measure (files %d, %d ms RTT)" % (files, rtt_ms), "value"))
        print("-" * 70)
        self.print_rows()


def spread(sorted_s):
    """Median / max of sorted seconds."""
    return "%.2f / %.2f s" % (sorted_s[len(sorted_s) // 2], sorted_s[-1])


def rss_growth(rows, cycle_rss, a):
    """Rows on the agent's RSS across the cycles: flat, or GROWING."""
    rows.add("RSS after each cycle (MiB)", " ".join("%d" % (k // 1024) for k in cycle_rss))
    # The first cycle fills the allocator's pools; flat means no growth after it.
    base = cycle_rss[1] if len(cycle_rss) > 2 else cycle_rss[0]
    grow = cycle_rss[-1] - base
    per = grow * 1024 / max(1, (a.cycle_files + a.mount_files) *
                               max(1, len(cycle_rss) - (2 if len(cycle_rss) > 2 else 1)))
    flat = grow <= max(8 * 1024, base // 20)  # within 8 MiB or 5 %
    rows.add("RSS growth cycle %d -> last" % (2 if len(cycle_rss) > 2 else 1),
             "%+d KiB (%+.1f B per file-cycle): %s"
             % (grow, per, "flat" if flat else "GROWING"))
    if len(cycle_rss) >= 6:
        # Whether it levels off: the allocator's pools may take a few rounds to fill.
        half = len(cycle_rss) // 2
        late = cycle_rss[-1] - cycle_rss[half - 1]
        rows.add("RSS growth cycle %d -> last" % half,
                 "%+d KiB: %s" % (late, "flat" if late <= max(8 * 1024, cycle_rss[half - 1] // 20)
                                  else "GROWING"))
