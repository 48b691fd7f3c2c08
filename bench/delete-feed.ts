/**
 * `npm run bench:delete`: how long deleting a large feed takes on the local stack, step by step. The demo
 * feed (29 real products, imported the normal way) is grown to BENCH_DELETE_PRODUCTS products with
 * bench/grow-feed.ts (each with a product record, a vector, a stored local-features object and visual
 * words), then `DELETE /admin/v1/feeds/demo` goes over HTTP (what it leaves after 20 s, the import runner
 * finishes: the bench waits for that too). In AWS that request has API Gateway's 29 s;
 * its steps talk to DynamoDB, S3 and OpenSearch there, to the embedded stores here, so the local figures
 * show where the time goes, not what AWS takes.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLocalStack } from '#lib/local/stack.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';
import { growFeed, readSeeds } from './grow-feed.ts';

const PRODUCTS = Number(process.env.BENCH_DELETE_PRODUCTS ?? 10_000);

const dataDir = await mkdtemp(join(tmpdir(), 'vps-bench-delete-'));
const stack = await startLocalStack({ ...process.env, LOG_LEVEL: 'silent', PORT: '0', DATA_DIR: dataDir });
try {
  await stack.importsIdle();
  const c = stack.container;
  const feedId = stack.demo.feedId;
  const seeded = (await c.products.page(feedId, 100)).items.map((p) => p.product_id);
  const growStart = performance.now();
  const seeds = await readSeeds(c, feedId, seeded);
  await growFeed(c, seeds, {
    feedId,
    from: 0,
    to: PRODUCTS - seeded.length,
    random: seededRandom(7),
    categories: ['Home', 'Tools'],
    words: 'own',
  });
  const features = (await c.objects.list(`features/${feedId}/`)).length;
  console.log(
    `grown to ${PRODUCTS} products (${features} feature objects) in ${((performance.now() - growStart) / 1000).toFixed(1)} s`,
  );

  // Each step of the deletion, timed where the use case calls it.
  const steps: [string, number][] = [];
  const timed = <T extends object>(name: string, target: T, method: keyof T & string) => {
    const original = (target[method] as (...args: unknown[]) => Promise<unknown>).bind(target);
    (target as Record<string, unknown>)[method] = async (...args: unknown[]) => {
      const start = performance.now();
      try {
        return await original(...args);
      } finally {
        steps.push([name, performance.now() - start]);
      }
    };
  };
  timed('products (records)', c.products, 'deleteFeed');
  timed('local features (objects)', c.features, 'deleteFeed');
  timed('visual words', c.visualWords, 'deleteFeed');
  timed('usage rows', c.usage, 'deleteFeed');
  timed('import records', c.imports, 'deleteFeed');
  const vectors = await c.feedVectors();
  timed('vectors', vectors, 'deleteFeed');

  const start = performance.now();
  const response = await fetch(`${stack.url}/admin/v1/feeds/${feedId}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${stack.adminToken}` },
  });
  const answered = performance.now() - start;
  console.log(`DELETE /admin/v1/feeds/${feedId}: ${response.status} in ${(answered / 1000).toFixed(2)} s`);
  // A 202 hands the rest to the import runner (in-process here): wait for it.
  await stack.importsIdle();
  const gone = (await c.feeds.get(feedId, { fresh: true })) === undefined;
  console.log(
    `feed ${gone ? 'gone' : 'still there'} ${((performance.now() - start) / 1000).toFixed(2)} s after the DELETE`,
  );
  for (const [name, ms] of steps) console.log(`  ${name.padEnd(26)} ${(ms / 1000).toFixed(2)} s`);
  const left =
    (await c.objects.list(`features/${feedId}/`)).length + (await c.products.page(feedId, 1)).items.length;
  console.log(`objects and products left: ${left}`);
} finally {
  await stack.close();
  await rm(dataDir, { recursive: true, force: true });
}
