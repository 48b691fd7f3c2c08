/**
 * `npm run bench:platform`: what the platform itself costs, before any model work. Starts the local
 * server on a fresh data folder, then measures start-up, the first request, and warm latency of an
 * authenticated image search on an empty feed (auth + domain + rate limit + metering + image header
 * check) over HTTP with sequential and concurrent clients.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { startLocalStack } from '#lib/local/stack.ts';

const SEQUENTIAL = 300;
const CONCURRENT = 600;
const CONCURRENCY = 8;

const dataDir = await mkdtemp(join(tmpdir(), 'vps-bench-'));
const startedAt = performance.now();
const stack = await startLocalStack({
  ...process.env,
  LOG_LEVEL: 'silent',
  PORT: '0',
  DATA_DIR: dataDir,
  PLAN_LIMIT_PRO: '1000000',
  // An empty demo feed: this measures the platform, not search (bench:search does that).
  DEMO_SEED: 'false',
});
const startupMs = performance.now() - startedAt;

const jpeg = await sharp({ create: { width: 1000, height: 750, channels: 3, background: '#88aacc' } })
  .jpeg({ quality: 85 })
  .toBuffer();
const body = JSON.stringify({ imageData: jpeg.toString('base64'), limit: 10 });
const request = async () => {
  const t = performance.now();
  const response = await fetch(`${stack.url}/api/v1/search/image`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.demo.searchId}` },
    body,
  });
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`unexpected status ${response.status}`);
  return performance.now() - t;
};

const first = await request();
const sequential: number[] = [];
for (let i = 0; i < SEQUENTIAL; i++) sequential.push(await request());

const concurrent: number[] = [];
const wallStart = performance.now();
let issued = 0;
await Promise.all(
  Array.from({ length: CONCURRENCY }, async () => {
    while (issued < CONCURRENT) {
      issued++;
      concurrent.push(await request());
    }
  }),
);
const wallMs = performance.now() - wallStart;

const pct = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const fmt = (n: number) => n.toFixed(1);
console.log(`start-up (stores + tables + demo feed + HTTP): ${fmt(startupMs)} ms`);
console.log(`first request: ${fmt(first)} ms`);
console.log(
  `warm, sequential (${SEQUENTIAL}): p50 ${fmt(pct(sequential, 50))} ms, p99 ${fmt(pct(sequential, 99))} ms`,
);
console.log(
  `warm, ${CONCURRENCY} concurrent (${CONCURRENT}): p50 ${fmt(pct(concurrent, 50))} ms, p99 ${fmt(pct(concurrent, 99))} ms, ${fmt((CONCURRENT / wallMs) * 1000)} req/s`,
);
console.log(
  `RSS: ${(process.memoryUsage().rss / 1024 / 1024).toFixed(0)} MB (server and client in one process)`,
);

await stack.close();
await rm(dataDir, { recursive: true, force: true });
