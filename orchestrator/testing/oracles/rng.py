"""splitmix64, written out exactly as in docs/semantics.rst ("Random numbers")."""

MASK64 = (1 << 64) - 1


class SplitMix64:
    """The splitmix64 generator; Python ints masked to 64 bits."""

    def __init__(self, seed: int) -> None:
        seed = int(seed)
        if seed < 0:
            raise ValueError("seed must be >= 0")
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """``((next() >> 32) * n) >> 32``: a value in ``0 .. n-1`` (``n >= 1``)."""
        n = int(n)
        if n < 1:
            raise ValueError("below(n) needs n >= 1")
        return ((self.next() >> 32) * n) >> 32
