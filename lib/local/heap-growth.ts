import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Once the start's loads are done (`npm start`'s warm-up): V8's heap may grow by 20 % between
 * collections from then on, instead of its default factor (up to ~2× for a small heap), and one full
 * collection now frees what the loads left behind (the vector index's parse: ~100 MB of garbage that the
 * default growth never collected, held as RSS). Measured at 100k products (docs/benchmarks.md "The rest of
 * the memory at 100k"). Not from the process's start: limiting the growth during the loads made the first
 * request ~0.3 s slower in garbage collection. Node refuses the flag in NODE_OPTIONS, and `gc` is reached
 * as V8 exposes it to a new context once `--expose-gc` is set (the flag alone changes nothing else).
 *
 * Needs a floor under the old generation, which `npm start` sets on node's command line
 * (`--initial-old-space-size=128`, below which V8 starts no full collection; not allowed in NODE_OPTIONS):
 * after the collection, a heap of ~60 MB live (10k products) grew 20 % between full collections, one every
 * ~3 searches, +40 ms of CPU and +20–25 ms of p50 per search in bench:search (docs/benchmarks.md "Heap
 * floor"). The benches run with the same flags (package.json; test/unit/local/heap-growth.test.ts).
 */
export function settleHeap(): void {
  setFlagsFromString('--heap-growing-percent=20');
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}
