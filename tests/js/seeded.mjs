// A small deterministic generator for the tests that draw many cases: tests must repeat.

/** Numbers in [0, 1) from `seed` (xorshift32). @param {number} seed */
export function random(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4294967296;
  };
}
