import { mkdtemp, readdir, rm, truncate } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PutCommand, QueryCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { createS3Client, S3ObjectStore } from '#lib/adapters/s3-object-store.ts';
import { levelIteratorPrototype } from '#lib/local/dynalite-iterators.ts';
import { openTestStores, startTestStores } from '#test/support/embedded-stores.ts';

describe('local stores after a killed run', () => {
  it('start again when the S3 server was killed writing an object’s metadata (that object is dropped)', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'vps-torn-'));
    const open = async () => {
      // As npm start does after a killed run
      const stores = await openTestStores(dataDir, { dropTornObjects: true });
      const { config } = stores;
      return { stores, objects: new S3ObjectStore(createS3Client(config), config.assetsBucket) };
    };
    try {
      // Prepare: two objects; the metadata file of one is left empty, as a SIGKILL during its write does
      const first = await open();
      await first.objects.put('features/f/a/0.gvlf', 'kept');
      await first.objects.put('features/f/b/0.gvlf', 'torn');
      // ...and a feed file whose body was cut after its metadata was written (s3rver writes it as soon as
      // the body has passed through, before the file write ends)
      await first.objects.put('imports/f/imp_1/feed', '{"id":"a"}\n{"id":"b"}\n');
      await first.objects.put('imports/f/imp_2/feed', '{"id":"c"}\n');
      await first.stores.close();
      const files = await readdir(join(dataDir, 's3'), { recursive: true });
      const torn = files.find((file) => file.endsWith('b/0.gvlf._S3rver_metadata.json'));
      expect(torn).toBeDefined();
      await truncate(join(dataDir, 's3', torn!), 0);
      const cut = files.find((file) => file.endsWith('imp_1/feed._S3rver_object'));
      await truncate(join(dataDir, 's3', cut!), 11);
      // Act
      const again = await open();
      try {
        // Assess
        expect(await again.objects.list('features/f/')).toEqual(['features/f/a/0.gvlf']);
        expect(await again.objects.list('imports/f/')).toEqual(['imports/f/imp_2/feed']);
        expect((await again.objects.get('features/f/a/0.gvlf'))?.toString()).toBe('kept');
      } finally {
        await again.stores.close();
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('the embedded DynamoDB server', () => {
  it('closes the LevelDB iterator of every Query and Scan (dynalite left each open: native memory)', async () => {
    // Prepare: count the iterators closed
    const { config, stop } = await startTestStores();
    const prototype = levelIteratorPrototype();
    const close = prototype.close;
    let closed = 0;
    prototype.close = function (this: unknown) {
      closed += 1;
      return close.call(this);
    };
    try {
      const db = createDocumentClient(config);
      const table = config.tables.usage;
      for (let i = 0; i < 5; i++)
        await db.send(new PutCommand({ TableName: table, Item: { pk: 'p', sk: `${i}` } }));
      closed = 0;
      // Act: queries to the end, queries cut by a limit, scans
      for (let i = 0; i < 10; i++) {
        const query = {
          TableName: table,
          KeyConditionExpression: 'pk = :pk',
          ExpressionAttributeValues: { ':pk': 'p' },
        };
        await db.send(new QueryCommand(query));
        await db.send(new QueryCommand({ ...query, Limit: 2 }));
        await db.send(new ScanCommand({ TableName: table }));
      }
      // Assess: one iterator closed for each (none before, until the server closed)
      await expect.poll(() => closed).toBeGreaterThanOrEqual(30);
    } finally {
      prototype.close = close;
      await stop();
    }
  });
});
