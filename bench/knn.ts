/**
 * k-NN benchmark of the local vector index (DESIGN §6: top-100 over 1M vectors with a filter ≤ 10 ms at
 * recall@10 ≥ 0.98 vs exact).
 *
 * Steps, per size:
 * 1. build (this process): synthetic clustered, L2-normalised vectors, upserted in batches through
 *    `UsearchVectorIndex`; ~10% of documents carry color=red; exact top-10 per query (with and without the
 *    filter) is accumulated chunk by chunk with usearch's exact search, so no copy of the data set is kept;
 *    flush, then index size on disk.
 * 2. query (a fresh child process, so RSS and load time are those of a server starting on the saved
 *    index): open, then top-100 searches with and without the filter: p50/p99 latency and recall@10.
 *
 * Usage: npm run bench:knn -- [--sizes=100000,1000000] [--dim=448] [--queries=200] [--dir=/tmp/knn-bench]
 *          [--quantization=f32|f16|i8]
 *          [--keep=true]   keep the built index; then re-run only the query phase with
 *   npx tsx bench/knn.ts --phase=query --dir=/tmp/knn-bench/<size> [--exact-threshold=N] [--scan-ratio=N]
 *     [--expansion-search=N]
 */
import { spawnSync } from 'node:child_process';
import { mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MetricKind, exactSearch } from 'usearch';
import { UsearchVectorIndex, type GraphQuantization } from '#lib/adapters/usearch-vector-index.ts';
import type { VectorDocument } from '#lib/ports.ts';

const FEED = 'bench-feed';
const FILTER = { color: ['red'] };
const TOP = 100;
const RECALL_AT = 10;
const CHUNK = 10_000;

const args = Object.fromEntries(
  process.argv
    .slice(2)
    .filter((arg) => arg.startsWith('--'))
    .map((arg) => {
      const [key, value = 'true'] = arg.slice(2).split('=');
      return [key, value];
    }),
) as Record<string, string | undefined>;

const dimension = Number(args.dim ?? (await manifestDimension()));
const queryCount = Number(args.queries ?? 200);
const baseDir = args.dir ?? join(tmpdir(), 'knn-bench');

/** The embedding dimension of the built model, if a manifest is present; else 448. */
async function manifestDimension(): Promise<number> {
  const dir = 'layers/models/build';
  try {
    for (const file of await readdir(dir)) {
      if (!file.endsWith('manifest.json')) continue;
      const manifest = JSON.parse(await readFile(join(dir, file), 'utf8')) as { embeddingDimension?: number };
      if (manifest.embeddingDimension) return manifest.embeddingDimension;
    }
  } catch {
    // No built model: fall back to the design's dimension.
  }
  return 448;
}

/** Deterministic generator: mulberry32 uniforms, Box–Muller normals. */
function rng(seed: number): { uniform: () => number; normal: () => number } {
  let state = seed >>> 0;
  const uniform = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const normal = (): number =>
    Math.sqrt(-2 * Math.log(uniform() + 1e-12)) * Math.cos(2 * Math.PI * uniform());
  return { uniform, normal };
}

function normalise(vector: Float32Array): Float32Array {
  let sum = 0;
  for (const value of vector) sum += value * value;
  const norm = Math.sqrt(sum);
  for (let i = 0; i < vector.length; i += 1) vector[i] = (vector[i] ?? 0) / norm;
  return vector;
}

/** Clustered data: one cluster per 1000 vectors, intra-cluster cosine ≈ 0.65 (noise norm ≈ 0.75). */
function makeGenerator(size: number, seed: number): () => Float32Array {
  const clusters = Math.max(10, Math.round(size / 1000));
  const centres = rng(seed);
  const centroids = Array.from({ length: clusters }, () =>
    normalise(Float32Array.from({ length: dimension }, () => centres.normal())),
  );
  const noise = rng(seed + 1);
  const scale = 0.75 / Math.sqrt(dimension);
  return () => {
    const centroid = centroids[Math.floor(noise.uniform() * clusters)] as Float32Array;
    return normalise(Float32Array.from(centroid, (value) => value + noise.normal() * scale));
  };
}

interface Truth {
  ids: string[][];
  scores: number[][];
}

/** Keeps the exact top-n per query while chunks stream by. */
function mergeTruth(
  truth: Truth,
  queries: Float32Array,
  chunk: Float32Array,
  ids: string[],
  n: number,
): void {
  if (ids.length === 0) return;
  const count = Math.min(n, ids.length);
  const matches = exactSearch(chunk, queries, dimension, count, MetricKind.IP, 0);
  // One query gives Matches, several give BatchMatches: both lay results out with a stride of count.
  const perQuery = count;
  for (let q = 0; q < queryCount; q += 1) {
    const merged: Array<[string, number]> = (truth.ids[q] ?? []).map((id, i) => [
      id,
      truth.scores[q]?.[i] ?? -2,
    ]);
    for (let j = 0; j < perQuery; j += 1) {
      const key = matches.keys[q * perQuery + j];
      const distance = matches.distances[q * perQuery + j];
      if (key === undefined || distance === undefined) continue;
      merged.push([ids[Number(key)] as string, 1 - distance]);
    }
    merged.sort((a, b) => b[1] - a[1]);
    truth.ids[q] = merged.slice(0, n).map(([id]) => id);
    truth.scores[q] = merged.slice(0, n).map(([, score]) => score);
  }
}

async function directoryBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) total += (await stat(join(entry.parentPath, entry.name))).size;
  }
  return total;
}

async function build(size: number, dir: string): Promise<Record<string, number>> {
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const next = makeGenerator(size, 42);
  const queries = new Float32Array(queryCount * dimension);
  for (let q = 0; q < queryCount; q += 1) queries.set(next(), q * dimension);
  const pick = rng(7);
  const index = new UsearchVectorIndex({
    dir: join(dir, 'index'),
    dimension,
    ...(args.quantization ? { quantization: args.quantization as GraphQuantization } : {}),
  });
  const filtered: Truth = { ids: [], scores: [] };
  const unfiltered: Truth = { ids: [], scores: [] };
  let insertMs = 0;
  let truthMs = 0;
  let reds = 0;
  for (let start = 0; start < size; start += CHUNK) {
    const documents: VectorDocument[] = [];
    const chunk = new Float32Array(Math.min(CHUNK, size - start) * dimension);
    const redChunk: Float32Array[] = [];
    const redIds: string[] = [];
    for (let i = 0; i < chunk.length / dimension; i += 1) {
      const vector = next();
      const red = pick.uniform() < 0.1;
      const id = `${FEED}/p${start + i}/0`;
      chunk.set(vector, i * dimension);
      if (red) {
        redChunk.push(vector);
        redIds.push(id);
      }
      documents.push({
        id,
        feedId: FEED,
        productId: `p${start + i}`,
        itemGroupId: `g${Math.floor((start + i) / 3)}`,
        vector,
        fields: { color: [red ? 'red' : 'blue'], brand: [`brand-${(start + i) % 50}`] },
      });
    }
    reds += redIds.length;
    let t = performance.now();
    await index.upsert(documents);
    insertMs += performance.now() - t;
    t = performance.now();
    mergeTruth(
      unfiltered,
      queries,
      chunk,
      documents.map((document) => document.id),
      RECALL_AT,
    );
    const redMatrix = new Float32Array(redChunk.length * dimension);
    redChunk.forEach((vector, i) => redMatrix.set(vector, i * dimension));
    mergeTruth(filtered, queries, redMatrix, redIds, RECALL_AT);
    truthMs += performance.now() - t;
    if ((start / CHUNK) % 10 === 9) {
      process.stderr.write(`  built ${start + CHUNK} vectors, insert ${(insertMs / 1000).toFixed(0)} s\n`);
    }
  }
  let t = performance.now();
  await index.flush();
  const flushMs = performance.now() - t;
  await writeFile(join(dir, 'queries.f32'), new Uint8Array(queries.buffer));
  await writeFile(
    join(dir, 'truth.json'),
    JSON.stringify({ filtered: filtered.ids, unfiltered: unfiltered.ids }),
  );
  t = performance.now();
  return {
    buildSeconds: insertMs / 1000,
    truthSeconds: truthMs / 1000,
    flushSeconds: flushMs / 1000,
    filterShare: reds / size,
    indexBytes: await directoryBytes(join(dir, 'index')),
    buildPeakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function query(dir: string): Promise<Record<string, number>> {
  const rssBefore = process.memoryUsage().rss;
  let t = performance.now();
  const index = await UsearchVectorIndex.open({
    dir: join(dir, 'index'),
    dimension,
    ...(args['exact-threshold'] ? { exactThreshold: Number(args['exact-threshold']) } : {}),
    ...(args['expansion-search'] ? { expansionSearch: Number(args['expansion-search']) } : {}),
    ...(args['scan-ratio'] ? { scanRatio: Number(args['scan-ratio']) } : {}),
  });
  const loadSeconds = (performance.now() - t) / 1000;
  const rssAfterLoad = process.memoryUsage().rss;
  const bytes = await readFile(join(dir, 'queries.f32'));
  const queries = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  const truth = JSON.parse(await readFile(join(dir, 'truth.json'), 'utf8')) as {
    filtered: string[][];
    unfiltered: string[][];
  };
  const out: Record<string, number> = {
    loadSeconds,
    rssAfterLoadBytes: rssAfterLoad,
    rssBeforeLoadBytes: rssBefore,
  };
  for (const mode of ['filtered', 'unfiltered'] as const) {
    const latencies: number[] = [];
    let found = 0;
    // Warm-up: first searches fault pages in and JIT the path.
    for (let q = 0; q < Math.min(20, queryCount); q += 1) {
      await index.search({
        feedId: FEED,
        vector: queries.subarray(q * dimension, (q + 1) * dimension),
        k: TOP,
      });
    }
    for (let q = 0; q < queryCount; q += 1) {
      const vector = queries.subarray(q * dimension, (q + 1) * dimension);
      t = performance.now();
      const hits = await index.search({
        feedId: FEED,
        vector,
        k: TOP,
        ...(mode === 'filtered' ? { filter: FILTER } : {}),
      });
      latencies.push(performance.now() - t);
      const expected = new Set(truth[mode][q]);
      found += hits.slice(0, RECALL_AT).filter((hit) => expected.has(hit.id)).length;
    }
    latencies.sort((a, b) => a - b);
    out[`${mode}P50Ms`] = percentile(latencies, 50);
    out[`${mode}P99Ms`] = percentile(latencies, 99);
    out[`${mode}Recall`] = found / (queryCount * RECALL_AT);
  }
  out.rssAfterQueriesBytes = process.memoryUsage().rss;
  return out;
}

if (args.phase === 'query') {
  const result = await query(args.dir as string);
  process.stdout.write(`${JSON.stringify(result)}\n`);
} else {
  const sizes = (args.sizes ?? '100000,1000000').split(',').map(Number);
  const mb = (value: number): string => `${(value / 2 ** 20).toFixed(0)} MB`;
  console.log(
    `k-NN bench: dim ${dimension}, graph ${args.quantization ?? 'i8 (default)'}, top-${TOP}, ${queryCount} queries, filter ${JSON.stringify(FILTER)}, ` +
      `${cpus().length} cores, load ${loadavg()
        .map((value) => value.toFixed(2))
        .join(' ')}`,
  );
  for (const size of sizes) {
    const dir = join(baseDir, String(size));
    console.log(`\n== ${size} vectors ==`);
    const built = await build(size, dir);
    console.log(
      `build ${built.buildSeconds?.toFixed(1)} s (${(size / (built.buildSeconds ?? 1)) | 0} vectors/s), ` +
        `flush ${built.flushSeconds?.toFixed(1)} s, on disk ${mb(built.indexBytes ?? 0)}, ` +
        `build peak RSS ${mb(built.buildPeakRssBytes ?? 0)}, filter share ${(built.filterShare ?? 0).toFixed(3)}`,
    );
    const child = spawnSync(
      process.execPath,
      [
        ...process.execArgv,
        fileURLToPath(import.meta.url),
        '--phase=query',
        `--dir=${dir}`,
        `--dim=${dimension}`,
        `--queries=${queryCount}`,
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
    );
    if (child.status !== 0) throw new Error(`query phase failed with status ${child.status}`);
    const q = JSON.parse(child.stdout.trim().split('\n').pop() ?? '{}') as Record<string, number>;
    console.log(
      `load ${q.loadSeconds?.toFixed(2)} s, RSS after load ${mb(q.rssAfterLoadBytes ?? 0)} ` +
        `(after queries ${mb(q.rssAfterQueriesBytes ?? 0)})`,
    );
    console.log(
      `filtered top-${TOP}: p50 ${q.filteredP50Ms?.toFixed(2)} ms, p99 ${q.filteredP99Ms?.toFixed(2)} ms, ` +
        `recall@${RECALL_AT} ${q.filteredRecall?.toFixed(4)}`,
    );
    console.log(
      `unfiltered top-${TOP}: p50 ${q.unfilteredP50Ms?.toFixed(2)} ms, p99 ${q.unfilteredP99Ms?.toFixed(2)} ms, ` +
        `recall@${RECALL_AT} ${q.unfilteredRecall?.toFixed(4)}`,
    );
    console.log(
      `load average after: ${loadavg()
        .map((value) => value.toFixed(2))
        .join(' ')}`,
    );
    if (args.keep !== 'true') await rm(dir, { recursive: true, force: true });
  }
}
