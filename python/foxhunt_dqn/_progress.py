"""A small progress display: a bar redrawn in place on a terminal, plain lines otherwise."""

import sys
import time


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


class Progress:
    """Progress(total, enabled=True, stream=sys.stderr).

    update(done, **fields) redraws at most every `interval` seconds on a TTY (a bar with
    steps, steps/s and the fields); on anything else it prints one plain line about every
    10% of `total`. close() prints the final state."""

    def __init__(self, total, enabled=True, stream=None, interval=0.2, width=24):
        self.total = max(1, int(total))
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval
        self.width = width
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._next_line = 0
        self._last = (0, {})
        self._open = True

    def _text(self, done, fields):
        elapsed = max(time.monotonic() - self.start, 1e-9)
        parts = [f"{done}/{self.total} steps", f"{done / elapsed:.0f} steps/s"]
        parts += [f"{k} {v}" for k, v in fields.items()]
        return " | ".join(parts)

    def due(self):
        """True when a TTY redraw is due (lets callers skip building the fields)."""
        return self.enabled and self.tty and time.monotonic() - self._last_draw >= self.interval

    def update(self, done, **fields):
        self._last = (done, fields)
        if not self.enabled:
            return
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw < self.interval and done < self.total:
                return
            self._last_draw = now
            frac = min(1.0, done / self.total)
            fill = int(round(frac * self.width))
            bar = "#" * fill + "." * (self.width - fill)
            self.stream.write(f"\r[{bar}] {frac * 100:5.1f}% " + self._text(done, fields) + "\x1b[K")
            self.stream.flush()
        elif done >= self._next_line:
            self._next_line = done + max(1, self.total // 10)
            self.stream.write(self._text(done, fields) + "\n")
            self.stream.flush()

    def close(self):
        if not self._open:
            return
        self._open = False
        if not self.enabled:
            return
        done, fields = self._last
        if self.tty:
            self._last_draw = float("-inf")
            self.update(done, **fields)
            self.stream.write("\n")
        else:
            self.stream.write(self._text(done, fields) + "\n")
        self.stream.flush()


def fmt_fields(return_mean=None, epsilon=None, loss=None):
    """The fields the trainers show: moving-average return, epsilon, loss."""
    return {
        "return(avg100)": _fmt(return_mean, ".1f"),
        "eps": _fmt(epsilon, ".3f"),
        "loss": _fmt(loss, ".4g"),
    }


class _TqdmBar:
    """The same interface over a tqdm bar: update(done, fields) sets the position and the
    postfix (tqdm redraws at its own rate)."""

    def __init__(self, tqdm_cls, total, interval=0.2):
        self.bar = tqdm_cls(total=int(total), unit="step", dynamic_ncols=True)
        self.interval = interval
        self._last = 0.0

    def due(self):
        return time.monotonic() - self._last >= self.interval

    def update(self, done, fields):
        self._last = time.monotonic()
        self.bar.n = int(done)
        self.bar.set_postfix(fields, refresh=False)
        self.bar.refresh()

    def close(self):
        self.bar.close()


class _PlainBar:
    """Progress with update(done, fields): redrawn in place on a TTY, plain lines otherwise."""

    def __init__(self, total, stream=None, interval=0.2):
        self.p = Progress(total, stream=stream, interval=interval)
        self.interval = interval
        self._last = float("-inf")

    def due(self):
        """At most every `interval` seconds (the caller builds the fields only then)."""
        return time.monotonic() - self._last >= self.interval

    def update(self, done, fields):
        self._last = time.monotonic()
        self.p.update(done, **fields)

    def close(self):
        self.p.close()


def make_bar(total, enabled, stream=None):
    """None when disabled; a tqdm bar when tqdm is installed; else a Progress."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PlainBar(total, stream)
    return _TqdmBar(tqdm, total)
