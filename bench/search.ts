/**
 * `npm run bench:search`: the catalogue end to end on the local stack (DESIGN §6).
 * 1. Ingestion: a CSV feed of INGESTED generated product photos (320 px JPEG, served over HTTP by this
 *    process) imported through the admin API: fetch, inspect, embed, index, store; products/s from the
 *    import's own start and finish times, then the same feed again (everything unchanged).
 * 2. Scale: the feed is grown to CATALOGUE products by inserting synthetic products directly into the
 *    stores (bench/grow-feed.ts): vectors drawn around the real embeddings, and copies of the stored
 *    local features and visual words of the real product each one's vector was drawn around.
 * 3. Warm image search over HTTP: 1000 × 750 JPEG queries (real demo photos, upscaled), sequential,
 *    everything included (auth, rate limit, decode, embedding, query features, k-NN, re-ranking of the top
 *    RERANK_TOP_N and the keypoint shortlist's WORD_SHORTLIST_TOP_N, grouping, hydration, metering). MIN_SCORE defaults to 0 here so that every query
 *    hydrates a full page of 10 (the demo photos are not in this catalogue); RERANK_TOP_N=0 measures the
 *    global-only pipeline.
 * Prints the figures and the process RSS (server and client in one process).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { settleHeap } from '#lib/local/heap-growth.ts';
import { startLocalStack } from '#lib/local/stack.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';
import { demoQueryBodies } from './demo-queries.ts';
import { growFeed, readSeeds } from './grow-feed.ts';

const INGESTED = Number(process.env.BENCH_INGESTED ?? 300);
const CATALOGUE = Number(process.env.BENCH_CATALOGUE ?? 10_000);
const QUERIES = Number(process.env.BENCH_QUERIES ?? 200);
const MATCHING_QUERIES = Number(process.env.BENCH_MATCHING_QUERIES ?? 100);

// Deterministic (mulberry32), so every run builds the same catalogue.
const rand = seededRandom(42);
const colour = () =>
  `rgb(${Math.floor(rand() * 256)},${Math.floor(rand() * 256)},${Math.floor(rand() * 256)})`;

/** A "product photo": shapes of random colours on a light background, as a 320-px JPEG. */
async function productPhoto(): Promise<Buffer> {
  const shapes = Array.from({ length: 4 }, () => {
    const x = Math.floor(rand() * 240);
    const y = Math.floor(rand() * 240);
    const s = 40 + Math.floor(rand() * 120);
    return rand() < 0.5
      ? `<circle cx="${x + s / 2}" cy="${y + s / 2}" r="${s / 2}" fill="${colour()}"/>`
      : `<rect x="${x}" y="${y}" width="${s}" height="${s * (0.5 + rand())}" fill="${colour()}" transform="rotate(${Math.floor(rand() * 90)} 160 160)"/>`;
  }).join('');
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="320" height="320"><rect width="320" height="320" fill="#f4f4f0"/>${shapes}</svg>`;
  return sharp(Buffer.from(svg)).jpeg({ quality: 88 }).toBuffer();
}

const pct = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const fmt = (n: number) => n.toFixed(1);
const mb = () => (process.memoryUsage().rss / 1024 / 1024).toFixed(0);

// --- images served like a shop's CDN ---
const photos = await Promise.all(Array.from({ length: INGESTED }, () => productPhoto()));
const cdn = createServer((request, response) => {
  const index = Number(/^\/p\/(\d+)\.jpg$/.exec(request.url ?? '')?.[1] ?? -1);
  const photo = photos[index];
  if (!photo) return response.writeHead(404).end();
  response.writeHead(200, { 'content-type': 'image/jpeg', 'content-length': photo.length }).end(photo);
});
await new Promise<void>((resolve) => cdn.listen(0, '127.0.0.1', resolve));
const cdnUrl = `http://127.0.0.1:${(cdn.address() as AddressInfo).port}`;

const dataDir = await mkdtemp(join(tmpdir(), 'vps-bench-search-'));
const stack = await startLocalStack({
  ...process.env,
  LOG_LEVEL: 'silent',
  PORT: '0',
  DATA_DIR: dataDir,
  DEMO_SEED: 'false',
  PLAN_LIMIT_PRO: '1000000',
  MIN_SCORE: process.env.MIN_SCORE ?? '0',
});
const admin = async (method: string, path: string, body?: unknown) => {
  const response = await fetch(`${stack.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${stack.adminToken}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return (await response.json()) as Record<string, never>;
};
await stack.container.vision();

// --- 1. ingestion through the admin API ---
const feedId = 'bench';
await admin('POST', '/admin/v1/feeds', { feedId, name: 'Bench', plan: 'pro' });
const { searchId } = (await admin('POST', `/admin/v1/feeds/${feedId}/keys`, {
  name: 'bench',
})) as unknown as { searchId: string };
const categories = ['Home > Kitchen', 'Home > Garden', 'Tools > Hand tools', 'Toys', 'Sports > Balls'];
const csv = [
  'id,item_group_id,title,image_link,price,availability,color,google_product_category',
  ...photos.map(
    (_, i) =>
      `p${i},${i % 3 === 0 ? `g${Math.floor(i / 3)}` : ''},Product ${i},${cdnUrl}/p/${i}.jpg,${(5 + (i % 50)).toFixed(2)} USD,in stock,${['red', 'blue', 'green'][i % 3]},${categories[i % categories.length]}`,
  ),
].join('\n');
const importOnce = async () => {
  const { importId } = (await admin('POST', `/admin/v1/feeds/${feedId}/imports`, {
    format: 'csv',
    content: csv,
  })) as unknown as { importId: string };
  await stack.importsIdle();
  const record = (await admin('GET', `/admin/v1/feeds/${feedId}/imports/${importId}`)) as unknown as {
    status: string;
    embedded: number;
    skipped: number;
    failed: number;
    startedAt: string;
    finishedAt: string;
  };
  const seconds = (Date.parse(record.finishedAt) - Date.parse(record.startedAt)) / 1000;
  return { record, seconds };
};
const first = await importOnce();
const second = await importOnce();

// --- 2. grow the feed to CATALOGUE products around the real embeddings ---
const c = stack.container;
const vectors = await c.vectors();
const growStart = performance.now();
const seeds = await readSeeds(
  c,
  feedId,
  photos.map((_, i) => `p${i}`),
);
await growFeed(c, seeds, { feedId, from: INGESTED, to: CATALOGUE, random: rand, categories, words: 'copy' });
const growSeconds = (performance.now() - growStart) / 1000;

// --- 3. warm image search over HTTP ---
// Served as `npm start` serves once warm (lib/local/main.ts: the heap settled after the loads;
// MALLOC_ARENA_MAX=2 is set by the npm script, as for `npm start`).
settleHeap();
const queries = await demoQueryBodies();
/** One search; its wall time and the score of its first result. */
const search = async (body: string) => {
  const t = performance.now();
  const response = await fetch(`${stack.url}/api/v1/search/image`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${searchId}` },
    body,
  });
  const results = (await response.json()) as { score?: number }[];
  if (response.status !== 200 || results.length !== 10)
    throw new Error(`unexpected answer ${response.status}`);
  return { ms: performance.now() - t, topScore: results[0]?.score ?? 0 };
};
const firstSearch = (await search(queries[0]!)).ms;
for (let i = 0; i < 10; i += 1) await search(queries[i % queries.length]!);
const latencies: number[] = [];
// CPU of the whole process (every thread: models, extraction, libvips, stores, client) per warm search: on
// 2 cores the searches' own work competes for them, so this bounds the latency as much as the pipeline.
const cpuBefore = process.cpuUsage();
for (let i = 0; i < QUERIES; i += 1) latencies.push((await search(queries[i % queries.length]!)).ms);
const cpuUsed = process.cpuUsage(cpuBefore);
const cpuPerSearch = (cpuUsed.user + cpuUsed.system) / 1000 / QUERIES;
// Queries whose product is in the catalogue: ingested photos upscaled to 1000 × 750 and re-encoded. A
// geometrically confirmed first result lets the search answer without waiting for the regional pass.
const matching = await Promise.all(
  photos.slice(0, 50).map(async (photo) =>
    JSON.stringify({
      imageData: (
        await sharp(photo).resize(1000, 750, { fit: 'fill' }).jpeg({ quality: 80 }).toBuffer()
      ).toString('base64'),
      limit: 10,
    }),
  ),
);
const matchingLatencies: number[] = [];
let confirmed = 0;
for (let i = 0; i < MATCHING_QUERIES; i += 1) {
  const { ms, topScore } = await search(matching[i % matching.length]!);
  matchingLatencies.push(ms);
  if (topScore >= 0.9) confirmed += 1;
}

console.log(`catalogue: ${await vectors.count(feedId)} vectors / ${CATALOGUE} products in feed ${feedId}`);
console.log(
  `search settings: RERANK_TOP_N ${stack.config.search.rerankTopN}, WORD_SHORTLIST_TOP_N ${stack.config.search.wordShortlistTopN}, ` +
    `REGIONAL_TOP_N ${stack.config.search.regionalTopN}, SECOND_LOOK_BOXES ${stack.config.search.secondLook.boxes} (` +
    `words ${stack.config.search.secondLook.wordTopN}), ` +
    `MIN_SCORE ${stack.config.search.minScore}, ` +
    `feature records ${(await c.objects.list(`features/`)).length}`,
);
console.log(
  `ingestion (${INGESTED} products, fetch + inspect + embed + index + store): ${fmt(INGESTED / first.seconds)} products/s ` +
    `(${first.seconds.toFixed(1)} s; embedded ${first.record.embedded}, failed ${first.record.failed})`,
);
console.log(
  `re-import unchanged (${INGESTED}): ${fmt(INGESTED / second.seconds)} products/s (skipped ${second.record.skipped}, embedded ${second.record.embedded})`,
);
console.log(
  `synthetic growth to ${CATALOGUE}: ${growSeconds.toFixed(1)} s (direct store + index + feature writes)`,
);
console.log(`first search after growth: ${fmt(firstSearch)} ms`);
console.log(
  `warm image search, 1000x750 JPEG, sequential (${QUERIES}): p50 ${fmt(pct(latencies, 50))} ms, p99 ${fmt(pct(latencies, 99))} ms, ` +
    `CPU ${fmt(cpuPerSearch)} ms per search (all threads)`,
);
console.log(
  `warm image search, catalogue products (1000x750 JPEG of an ingested photo), sequential (${MATCHING_QUERIES}): ` +
    `p50 ${fmt(pct(matchingLatencies, 50))} ms, p99 ${fmt(pct(matchingLatencies, 99))} ms, first result scoring ≥ 0.9: ${confirmed}/${MATCHING_QUERIES}`,
);
console.log(`RSS: ${mb()} MB (server, stores, models and client in one process)`);

await stack.close();
cdn.close();
await rm(dataDir, { recursive: true, force: true });
