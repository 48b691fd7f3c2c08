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
  it('pauses an import before the function times out and writes its request marker again', async () => {
    // Prepare: 9 products in chunks of 3, each image 60 ms to fetch; the function has 300 ms left over
    // its margin
    const names = Array.from({ length: 9 }, (_, i) => `p${i}`);
    const w = world(new Map(names.map((n) => [`https://cdn.example/${n}.jpg`, Buffer.from(`image ${n}`)])));
    w.deps.limits = { ...w.deps.limits, imageConcurrency: 1 };
    const fetch = w.fetcher.fetch.bind(w.fetcher);
    w.fetcher.fetch = async (url, limits) => {
      await new Promise((resolve) => setTimeout(resolve, 60));
      return fetch(url, limits);
    };
    const content = names
      .map((id) =>
        JSON.stringify({ id, title: id, image_link: `https://cdn.example/${id}.jpg`, price: '1.00 USD' }),
      )
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
    // Act
    await runImportEvent(container, event, 1300, 1000);
    // Assess: paused at a checkpoint, and the marker that starts the next invocation is there again
    const paused = await w.imports.get('shop', queued.importId);
    expect(paused?.status).toBe('running');
    expect(paused?.checkpointRow).toBeGreaterThan(0);
    expect(paused?.checkpointRow).toBeLessThan(9);
    expect(await w.objects.get(request)).toBeDefined();
    expect(w.imports.leases.size).toBe(0);
    // The next invocation finishes it
    await runImportEvent(container, event);
    expect((await w.imports.get('shop', queued.importId))?.status).toBe('succeeded');
    expect(w.products.rows.size).toBe(9);
  });
});
