/**
 * `npm run bench:soak`: does the local server's memory stay flat under a steady stream of requests?
 * A local stack in a temp folder (this process, as `npm start` runs it) seeds the demo feed, then answers
 * BENCH_SOAK_REQUESTS requests over HTTP, two at a time: related products by id, image searches of the
 * demo photos (1000 × 750 JPEG) and root searches, in turn. The process's RSS and V8 heap are printed
 * after a warm-up and every BENCH_SOAK_EVERY requests (each after a full collection), then the growth per
 * request from the warm-up to the end: a leak of a few KB per request shows as a steady climb there.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { settleHeap } from '#lib/local/heap-growth.ts';
import { startLocalStack } from '#lib/local/stack.ts';
import { demoQueryBodies } from './demo-queries.ts';

const REQUESTS = Number(process.env.BENCH_SOAK_REQUESTS ?? 3000);
const EVERY = Number(process.env.BENCH_SOAK_EVERY ?? 500);
const WARM_UP = 150;
const MB = 1024 * 1024;

const dataDir = await mkdtemp(join(tmpdir(), 'vps-soak-'));
const stack = await startLocalStack({
  ...process.env,
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'silent',
  PORT: '0',
  DATA_DIR: dataDir,
  // The demo feed is on the pro plan: no 429 in the run.
  PLAN_LIMIT_PRO: '100000000',
});
try {
  if (!(await stack.demoSeeded())) throw new Error('The demo feed was not imported.');
  const productIds = [
    ...(await readFile(new URL('../demo/feed.xml', import.meta.url), 'utf8')).matchAll(/<g:id>([^<]+)</g),
  ].map((match) => match[1]!);
  const searches = await demoQueryBodies();
  const request = (i: number): [string, string] => {
    const kind = i % 3;
    if (kind === 0)
      return ['/api/v1/related', JSON.stringify({ productId: productIds[i % productIds.length], limit: 10 })];
    const body = searches[i % searches.length]!;
    if (kind === 1) return ['/api/v1/search/image', body];
    return ['/', JSON.stringify({ ...JSON.parse(body), feedId: stack.demo.searchId })];
  };
  const failures = new Map<number, number>();
  let next = 0;
  const send = async (until: number) => {
    while (next < until) {
      const [path, body] = request(next++);
      const response = await fetch(`${stack.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.demo.searchId}` },
        body,
      });
      await response.arrayBuffer();
      if (response.status !== 200) failures.set(response.status, (failures.get(response.status) ?? 0) + 1);
    }
  };
  const sample = (label: string) => {
    settleHeap();
    const { rss, heapUsed } = process.memoryUsage();
    console.log(
      `${label.padStart(8)}  RSS ${(rss / MB).toFixed(0).padStart(5)} MB  heap ${(heapUsed / MB).toFixed(0).padStart(4)} MB`,
    );
    return rss;
  };
  const started = Date.now();
  await Promise.all([send(WARM_UP), send(WARM_UP)]);
  const warm = sample(String(WARM_UP));
  for (let at = WARM_UP + EVERY; at - EVERY < REQUESTS; at += EVERY) {
    const until = Math.min(at, REQUESTS);
    await Promise.all([send(until), send(until)]);
    sample(String(until));
  }
  const end = process.memoryUsage().rss;
  const counted = Math.max(1, next - WARM_UP);
  console.log(
    `\n${next} requests in ${((Date.now() - started) / 1000).toFixed(0)} s; RSS growth after the warm-up: ` +
      `${((end - warm) / MB).toFixed(0)} MB, ${((end - warm) / 1024 / counted).toFixed(1)} KB per request; ` +
      `not 200: ${failures.size === 0 ? 'none' : JSON.stringify(Object.fromEntries(failures))}`,
  );
} finally {
  await stack.close();
  await rm(dataDir, { recursive: true, force: true });
}
