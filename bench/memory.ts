/**
 * `npm run bench:memory`: the local server's memory at a large catalogue (DESIGN §6: RSS ≤ 800 MB at 100k
 * products).
 * 1. Build (this process): a local stack in a temp folder imports the demo catalogue (29 real product
 *    photos: embeddings, local features, visual words), then the demo feed is grown to BENCH_CATALOGUE
 *    products (default 100,000) straight into the stores (bench/grow-feed.ts). Every synthetic product has
 *    words of its own, as many as its real seed (~6,800 on average for the demo photos), so the word
 *    index has a real catalogue's size. The stack is closed (everything flushed).
 * 2. Serve (a child process, `--serve <dir>`): a new process starts the stack on that folder, as
 *    `npm start` would after a restart, answers BENCH_QUERIES image searches over HTTP (the demo photos as
 *    1000 × 750 JPEG), and prints its memory before and after: the server, its stores, models and indices,
 *    plus a small client (the query bodies); then reads BENCH_FEATURE_READS other products' features, as
 *    a server up for long would have verified, and prints its memory with the feature cache full.
 * Prints the on-disk sizes of the vector and word indices too. BENCH_DATA_DIR keeps the built folder (and
 * reuses it when it holds a build of BENCH_CATALOGUE products), to serve it again without building.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { settleHeap } from '#lib/local/heap-growth.ts';
import { DEMO_FEED_ID, startLocalStack } from '#lib/local/stack.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';
import { demoQueryBodies } from './demo-queries.ts';
import { growFeed, readSeeds } from './grow-feed.ts';

const CATALOGUE = Number(process.env.BENCH_CATALOGUE ?? 100_000);
const QUERIES = Number(process.env.BENCH_QUERIES ?? 60);
/** Different synthetic products whose features are read after the searches (more than the cache holds). */
const FEATURE_READS = Number(process.env.BENCH_FEATURE_READS ?? 3000);
const MB = 1024 * 1024;
const env = (dataDir: string, demoSeed: boolean) => ({
  ...process.env,
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'silent',
  PORT: '0',
  DATA_DIR: dataDir,
  // Only the build imports the demo catalogue: a later start would re-import it in full mode, which
  // deletes every product the feed file does not list.
  DEMO_SEED: String(demoSeed),
  PLAN_LIMIT_FREE: '1000000',
  PLAN_LIMIT_PRO: '1000000',
});

function memory(): string {
  const { rss, heapUsed, external, arrayBuffers } = process.memoryUsage();
  return `RSS ${(rss / MB).toFixed(0)} MB (JS heap ${(heapUsed / MB).toFixed(0)} MB, array buffers ${(arrayBuffers / MB).toFixed(0)} MB, other external ${((external - arrayBuffers) / MB).toFixed(0)} MB)`;
}

/** Bytes of a file, or of every file under a folder. */
async function diskBytes(path: string): Promise<number> {
  const info = await stat(path);
  if (!info.isDirectory()) return info.size;
  let total = 0;
  for (const name of await readdir(path)) total += await diskBytes(join(path, name));
  return total;
}

async function build(dataDir: string): Promise<void> {
  const started = performance.now();
  const stack = await startLocalStack(env(dataDir, true));
  await stack.importsIdle();
  const c = stack.container;
  const seeded = await c.products.page(DEMO_FEED_ID, 1000);
  const seeds = await readSeeds(
    c,
    DEMO_FEED_ID,
    seeded.items.map((product) => product.product_id),
  );
  const words = seeds.words.filter((list) => list !== undefined);
  console.log(
    `demo catalogue imported: ${seeds.vectors.length} products, ${(words.reduce((sum, list) => sum + list.length, 0) / words.length).toFixed(0)} visual words per image on average (${((performance.now() - started) / 1000).toFixed(1)} s)`,
  );
  const growStart = performance.now();
  await growFeed(c, seeds, {
    feedId: DEMO_FEED_ID,
    from: seeds.vectors.length,
    to: CATALOGUE,
    random: seededRandom(42),
    categories: ['Home > Kitchen', 'Home > Garden', 'Tools > Hand tools', 'Toys', 'Sports > Balls'],
    words: 'own',
  });
  console.log(
    `grown to ${CATALOGUE} products: ${((performance.now() - growStart) / 1000).toFixed(1)} s; build process ${memory()}`,
  );
  // Closing writes the index files: at this size the words' file is rewritten whole (streamed, word-file.ts).
  const closeStart = performance.now();
  await stack.close();
  console.log(`stack closed, indices written: ${((performance.now() - closeStart) / 1000).toFixed(1)} s`);
}

async function serve(dataDir: string): Promise<void> {
  // As `npm start` runs the server (lib/local/main.ts: the warm-up at once, the first request meeting it;
  // MALLOC_ARENA_MAX below, as package.json sets it).
  const started = performance.now();
  const stack = await startLocalStack(env(dataDir, false));
  void stack.warm().then(settleHeap);
  console.log(`started in ${((performance.now() - started) / 1000).toFixed(1)} s: ${memory()}`);
  const bodies = await demoQueryBodies();
  const latencies: number[] = [];
  let found = 0;
  for (let i = 0; i < QUERIES; i += 1) {
    const t = performance.now();
    const response = await fetch(`${stack.url}/api/v1/search/image`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.demo.searchId}` },
      body: bodies[i % bodies.length],
    });
    const results = (await response.json()) as unknown[];
    if (response.status !== 200) throw new Error(`search answered ${response.status}`);
    latencies.push(performance.now() - t);
    if (results.length > 0) found += 1;
    if (i === 0) console.log(`after the first search (${latencies[0]!.toFixed(0)} ms): ${memory()}`);
  }
  latencies.sort((a, b) => a - b);
  console.log(
    `after ${QUERIES} searches (p50 ${latencies[latencies.length >> 1]!.toFixed(0)} ms, ${found} with results): ${memory()}`,
  );
  // A server up for long verifies many different products: their features fill the decoded-feature cache
  // to its bound (FEATURE_CACHE_ITEMS / FEATURE_CACHE_MB), which 60 searches of the demo photos do not.
  const features = stack.container.features;
  for (let first = 0; first < FEATURE_READS; first += 50) {
    const refs = Array.from({ length: Math.min(50, FEATURE_READS - first) }, (_, i) => ({
      feedId: DEMO_FEED_ID,
      productId: `s${first + i}`,
      imageIndex: 0,
    }));
    await features.getMany(refs);
  }
  if (FEATURE_READS > 0)
    console.log(`after reading ${FEATURE_READS} products' features (the cache full): ${memory()}`);
  await stack.close();
}

if (process.argv[2] === '--serve') {
  await serve(process.argv[3]!);
} else {
  const kept = process.env.BENCH_DATA_DIR;
  const dataDir = kept ?? (await mkdtemp(join(tmpdir(), 'vps-bench-memory-')));
  const marker = join(dataDir, `bench-memory-${CATALOGUE}.built`);
  try {
    if (
      await stat(marker).then(
        () => false,
        () => true,
      )
    ) {
      await build(dataDir);
      await writeFile(marker, new Date().toISOString());
    } else console.log(`reusing the build of ${CATALOGUE} products in ${dataDir}`);
    const sizes = async (dir: string) =>
      (
        await Promise.all(
          (await readdir(dir)).map(
            async (name) => `${name} ${((await diskBytes(join(dir, name))) / MB).toFixed(0)} MB`,
          ),
        )
      ).join(', ');
    console.log(`on disk: ${await sizes(dataDir)}; in vectors/: ${await sizes(join(dataDir, 'vectors'))}`);
    // The server on its own: a new process, as after a restart (no build garbage, nothing preloaded).
    const child = spawn(process.execPath, [...process.execArgv, import.meta.filename, '--serve', dataDir], {
      stdio: 'inherit',
      // glibc's malloc arenas: 2 instead of 8 per core, as `npm start` sets (docs/benchmarks.md "Memory").
      env: { ...process.env, MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? '2' },
    });
    const code = await new Promise<number | null>((done) => child.on('exit', done));
    if (code !== 0) throw new Error(`serving process exited with ${code}`);
  } finally {
    if (!kept) await rm(dataDir, { recursive: true, force: true });
  }
}
