import type { S3Event, SQSEvent } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { importsOf, runImportEvent } from '#functions/import-worker.ts';
import { importObjectKeys } from '#lib/domain/catalogue/imports.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import { createLogger } from '#lib/log.ts';
import { world } from './fakes.ts';

const s3Record = (key: string) => ({ s3: { object: { key } } }) as unknown as S3Event['Records'][number];

describe('import worker events', () => {
  it('takes imports from S3 notifications of request markers only', () => {
    // Prepare: the feed file itself also lands under imports/ and must not start a second run.
    const event = {
      Records: [s3Record('imports/shop/imp_1/request.json'), s3Record('imports/shop/imp_1/feed')],
    } as S3Event;
    // Act / Assess
    expect(importsOf(event)).toEqual([{ feedId: 'shop', importId: 'imp_1' }]);
  });

  it('unwraps S3 notifications delivered through SQS and accepts direct messages', () => {
    const viaSqs = {
      Records: [{ body: JSON.stringify({ Records: [s3Record('imports/a%2Db/imp_2/request.json')] }) }],
    } as SQSEvent;
    const direct = { Records: [{ body: JSON.stringify({ feedId: 'f', importId: 'imp_3' }) }] } as SQSEvent;
    const testEvent = { Records: [{ body: JSON.stringify({ Event: 's3:TestEvent' }) }] } as SQSEvent;
    expect(importsOf(viaSqs)).toEqual([{ feedId: 'a-b', importId: 'imp_2' }]);
    expect(importsOf(direct)).toEqual([{ feedId: 'f', importId: 'imp_3' }]);
    expect(importsOf(testEvent)).toEqual([]);
  });
});

describe('import worker time budget', () => {
  const img = (id: string) => `https://cdn.example/${id}.jpg`;

  /** A world whose feed "shop" has a queued full import of `names`, its request marker not yet written. */
  async function queuedImport(names: string[]) {
    const w = world(new Map(names.map((n) => [img(n), Buffer.from(`image ${n}`)])));
    const content = names
      .map((id) => JSON.stringify({ id, title: id, image_link: img(id), price: '1.00 USD' }))
      .join('\n');
    const queued = await startImport(
      {
        feeds: w.feeds,
        imports: w.imports,
        objects: w.objects,
        dispatcher: { dispatch: async () => undefined },
        clock: w.deps.clock,
      },
      'shop',
      { content, format: 'jsonl', mode: 'full' },
    );
    const { request } = importObjectKeys('shop', queued.importId);
    await w.objects.delete(request);
    const container = { ingest: w.deps, objects: w.objects, logger: createLogger('silent') };
    const event = { Records: [s3Record(request)] } as S3Event;
    return { w, importId: queued.importId, request, container, event };
  }

  it('pauses an import before the function times out and writes its request marker again', async () => {
    // Prepare: 9 products in chunks of 3, each image 60 ms to fetch; the function has 300 ms left over
    // its margin
    const { w, importId, request, container, event } = await queuedImport(
      Array.from({ length: 9 }, (_, i) => `p${i}`),
    );
    w.deps.limits = { ...w.deps.limits, imageConcurrency: 1 };
    w.fetcher.before = () => new Promise((resolve) => setTimeout(resolve, 60));
    // Act
    await runImportEvent(container, event, 1300, 1000);
    // Assess: paused at a checkpoint, and the marker that starts the next invocation is there again
    const paused = await w.imports.get('shop', importId);
    expect(paused?.status).toBe('running');
    expect(paused?.checkpointRow).toBeGreaterThan(0);
    expect(paused?.checkpointRow).toBeLessThan(9);
    expect(await w.objects.get(request)).toBeDefined();
    expect(w.imports.leases.size).toBe(0);
    // The next invocation finishes it
    await runImportEvent(container, event);
    expect((await w.imports.get('shop', importId))?.status).toBe('succeeded');
    expect(w.products.rows.size).toBe(9);
  });

  it('pauses a long removal of unlisted products between batches', async () => {
    // Prepare: 2,000 products of an earlier import, which a full import of 3 removes 500 at a time,
    // 150 ms per batch; the pause is asked for 300 ms in
    const { w, importId, request, container, event } = await queuedImport(['a', 'b', 'c']);
    const earlier = Array.from({ length: 2000 }, (_, i) => ({
      feed_id: 'shop',
      product_id: `old${i}`,
      seen_import: 'imp_earlier',
      update_hash: 'x',
      group: `old${i}`,
    }));
    await w.products.putMany(earlier as never);
    const deleteMany = w.products.deleteMany.bind(w.products);
    w.products.deleteMany = async (feedId, ids) => {
      await new Promise((resolve) => setTimeout(resolve, 150));
      return deleteMany(feedId, ids);
    };
    // Act
    await runImportEvent(container, event, 1300, 1000);
    // Assess: paused part way through the removal, to be resumed by the marker's new invocation
    const paused = await w.imports.get('shop', importId);
    expect(paused?.status).toBe('running');
    expect(paused?.removed).toBeGreaterThan(0);
    expect(paused?.removed).toBeLessThan(2000);
    expect(await w.objects.get(request)).toBeDefined();
    await runImportEvent(container, event);
    expect(await w.imports.get('shop', importId)).toMatchObject({
      status: 'succeeded',
      removed: 2000,
    });
    // A pause that comes when nothing is left to run writes no marker
    await w.objects.delete(request);
    const takeLease = w.imports.takeLease.bind(w.imports);
    w.imports.takeLease = async (...args) => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return takeLease(...args);
    };
    await runImportEvent(container, event, 0, 0);
    expect(await w.objects.get(request)).toBeUndefined();
  });
});
