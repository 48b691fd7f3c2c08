import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { join, relative, sep } from 'node:path';
import { CreateTableCommand, DescribeTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { CreateBucketCommand, HeadBucketCommand, S3Client } from '@aws-sdk/client-s3';
import dynalite from 'dynalite';
import S3rver from 's3rver';
import { TABLES } from '#lib/adapters/dynamodb-tables.ts';
import type { Config } from '#lib/config.ts';
import { closeDynaliteIterators } from '#lib/local/dynalite-iterators.ts';

/**
 * The embedded real-protocol servers of local mode: dynalite (DynamoDB protocol, persisted with LevelDB)
 * and s3rver (S3 protocol, persisted as files), both in this process on loopback ports.
 */
export interface EmbeddedStores {
  dynamodbEndpoint: string;
  s3Endpoint: string;
  close(): Promise<void>;
}

/**
 * `options.dropTornObjects`: after a killed run, first drop the objects it may have left half written
 * (a walk of every stored object: 8.2 s at 100k, so not at every start).
 */
export async function startEmbeddedStores(
  dataDir: string,
  options: { dropTornObjects?: boolean } = {},
): Promise<EmbeddedStores> {
  await mkdir(join(dataDir, 's3'), { recursive: true });
  if (options.dropTornObjects) await dropTornObjects(join(dataDir, 's3'));
  closeDynaliteIterators();
  const dynamo = dynalite({
    path: join(dataDir, 'dynamodb'),
    createTableMs: 0,
    deleteTableMs: 0,
    updateTableMs: 0,
  });
  await new Promise<void>((resolve, reject) => {
    dynamo.once('error', reject);
    dynamo.listen(0, '127.0.0.1', () => resolve());
  });
  const s3 = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: join(dataDir, 's3') });
  const s3Address = (await s3.run()) as AddressInfo;
  return {
    dynamodbEndpoint: `http://127.0.0.1:${(dynamo.address() as AddressInfo).port}`,
    s3Endpoint: `http://127.0.0.1:${s3Address.port}`,
    async close() {
      await s3.close();
      await new Promise<void>((resolve) => dynamo.close(() => resolve()));
    },
  };
}

/** Creates the tables and the bucket the configuration names, when they do not exist yet. */
export async function ensureStorage(config: Config): Promise<void> {
  const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };
  const db = new DynamoDBClient({ region: config.region, endpoint: config.dynamodbEndpoint, credentials });
  for (const table of TABLES) {
    const name = config.tables[table.configKey];
    const exists = await db.send(new DescribeTableCommand({ TableName: name })).then(
      () => true,
      (error: Error) => {
        if (error.name === 'ResourceNotFoundException') return false;
        throw error;
      },
    );
    if (exists) continue;
    const attributes = new Set<string>([table.partitionKey]);
    if (table.sortKey) attributes.add(table.sortKey);
    for (const index of table.indexes) {
      attributes.add(index.partitionKey);
      if (index.sortKey) attributes.add(index.sortKey);
    }
    const keySchema = (pk: string, sk?: string) => [
      { AttributeName: pk, KeyType: 'HASH' as const },
      ...(sk ? [{ AttributeName: sk, KeyType: 'RANGE' as const }] : []),
    ];
    await db.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [...attributes].map((a) => ({ AttributeName: a, AttributeType: 'S' })),
        KeySchema: keySchema(table.partitionKey, table.sortKey),
        ...(table.indexes.length > 0
          ? {
              GlobalSecondaryIndexes: table.indexes.map((index) => ({
                IndexName: index.name,
                KeySchema: keySchema(index.partitionKey, index.sortKey),
                Projection: { ProjectionType: 'ALL' },
              })),
            }
          : {}),
      }),
    );
  }
  db.destroy();

  const s3 = new S3Client({
    region: config.region,
    endpoint: config.s3Endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
  });
  const bucketExists = await s3.send(new HeadBucketCommand({ Bucket: config.assetsBucket })).then(
    () => true,
    () => false,
  );
  if (!bucketExists)
    await s3.send(new CreateBucketCommand({ Bucket: config.assetsBucket })).catch((error: Error) => {
      // The check failed for another reason than a missing bucket (s3rver answers it from a listing).
      if (error.name !== 'BucketAlreadyOwnedByYou' && error.name !== 'BucketAlreadyExists') throw error;
    });
  s3.destroy();
}

const S3RVER_METADATA_SUFFIX = '._S3rver_metadata.json';
/** How s3rver names an object's body: `<bucket folder>/<key>._S3rver_object` (and its `.md5` beside it). */
export const S3RVER_OBJECT_SUFFIX = '._S3rver_object';

/**
 * s3rver writes an object's metadata file in place: a process killed meanwhile can leave it empty, and
 * s3rver then answers 500 for that object and for every listing that reaches it (the feed's deletion,
 * even its own bucket check at the next start). Such objects are dropped before it starts: their
 * writer had not finished (a feature record, a feed file), and what they were for is redone or missing.
 */
async function dropTornObjects(root: string): Promise<void> {
  for (const entry of await readdir(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith(S3RVER_METADATA_SUFFIX)) continue;
    const metadata = join(entry.parentPath, entry.name);
    const base = metadata.slice(0, -S3RVER_METADATA_SUFFIX.length);
    if ((await stat(metadata)).size > 0 && !(isImportFile(root, base) && !(await bodyComplete(base))))
      continue;
    for (const file of [`${base}${S3RVER_OBJECT_SUFFIX}`, `${base}${S3RVER_OBJECT_SUFFIX}.md5`, metadata])
      await rm(file, { force: true });
  }
}

/** An object under `<bucket>/imports/`: a feed file or an import's request marker. */
function isImportFile(root: string, base: string): boolean {
  return relative(root, base).split(sep)[1] === 'imports';
}

/**
 * Whether an object's body has the MD5 s3rver recorded for it. s3rver writes the metadata once the body
 * has passed through, before its file write has finished: a kill in between leaves a complete-looking
 * object cut short, and a feed file cut at a line end would make a full import remove the products after
 * the cut. Checked for imports/ only, which holds few files (a URL import downloads a dropped feed file
 * again, a content import without its file fails saying so); the many feature records are not checked.
 */
async function bodyComplete(base: string): Promise<boolean> {
  const recorded = await readFile(`${base}${S3RVER_OBJECT_SUFFIX}.md5`, 'utf8').catch(() => undefined);
  if (recorded === undefined) return true;
  const hash = createHash('md5');
  try {
    for await (const chunk of createReadStream(`${base}${S3RVER_OBJECT_SUFFIX}`))
      hash.update(chunk as Buffer);
  } catch {
    return false;
  }
  return hash.digest('hex') === recorded.trim();
}
