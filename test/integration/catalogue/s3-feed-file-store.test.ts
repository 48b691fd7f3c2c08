import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3FeedFileStore } from '#lib/adapters/s3-feed-file-store.ts';
import { createS3Client } from '#lib/adapters/s3-object-store.ts';
import { startTestStores } from '#test/support/embedded-stores.ts';

let stop: () => Promise<void>;
let files: S3FeedFileStore;

beforeAll(async () => {
  const stores = await startTestStores();
  stop = stores.stop;
  files = new S3FeedFileStore(createS3Client(stores.config), stores.config.assetsBucket);
});

afterAll(async () => {
  await stop?.();
});

async function* chunks(total: number, size: number): AsyncGenerator<Buffer> {
  for (let at = 0; at < total; at += size) yield Buffer.alloc(Math.min(size, total - at), at % 251);
}

async function readAll(body: AsyncIterable<Uint8Array> | undefined): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of body ?? []) parts.push(Buffer.from(chunk));
  return Buffer.concat(parts);
}

describe('S3FeedFileStore on the S3-protocol server', () => {
  it('streams a small file in with one PUT and back out', async () => {
    expect(await files.write('imports/f/1/feed', chunks(1000, 100), 'text/csv')).toBe(1000);
    expect((await readAll(await files.read('imports/f/1/feed'))).length).toBe(1000);
  });

  it('streams a file larger than one part through a multipart upload', async () => {
    // Prepare: 17 MiB in 1 MiB chunks → parts of 8, 8 and 1 MiB.
    const total = 17 * 1024 * 1024;
    // Act
    const written = await files.write('imports/f/2/feed', chunks(total, 1024 * 1024), 'application/xml');
    const back = await readAll(await files.read('imports/f/2/feed'));
    // Assess
    expect(written).toBe(total);
    expect(back.length).toBe(total);
    expect(back.equals(await readAll(chunks(total, 1024 * 1024)))).toBe(true);
  });

  it('answers undefined for a missing file', async () => {
    expect(await files.read('imports/f/none/feed')).toBeUndefined();
  });
});
