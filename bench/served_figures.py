"""What a serving benchmark reads after a load run: tokens/s from serve_load.mjs's output and the
series of the server's /metrics (Prometheus text), by name."""
import re


class Served:
    def __init__(self, load_path, metrics_path):
        self.load = open(load_path).read()
        self.metrics = open(metrics_path).read()
        self.tokens_per_s = float(re.search(r'([0-9.]+) tokens/s', self.load).group(1))

    def metric(self, name):
        """The series' value (the first, whatever its labels), or 0 when absent."""
        m = re.search(r'^' + name + r'(?:\{[^}]*\})? ([0-9.e+-]+)$', self.metrics, re.M)
        return float(m.group(1)) if m else 0.0
