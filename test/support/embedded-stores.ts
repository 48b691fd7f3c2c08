import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbFeedStore } from '#lib/adapters/dynamodb-feed-store.ts';
import { DynamoDbImportStore } from '#lib/adapters/dynamodb-import-store.ts';
import { DynamoDbKeyStore } from '#lib/adapters/dynamodb-key-store.ts';
import { DynamoDbProductStore } from '#lib/adapters/dynamodb-product-store.ts';
import { DynamoDbUsageStore } from '#lib/adapters/dynamodb-usage-store.ts';
import { ObjectStoreFeatureStore } from '#lib/adapters/object-store-feature-store.ts';
import { createS3Client, S3ObjectStore } from '#lib/adapters/s3-object-store.ts';
import { type Config, loadConfig } from '#lib/config.ts';
import { ensureStorage, startEmbeddedStores } from '#lib/local/embedded-stores.ts';

/** The real-protocol servers of local mode in a temp folder, with tables and bucket created. */
export async function startTestStores(): Promise<{ config: Config; stop(): Promise<void> }> {
  const dataDir = await mkdtemp(join(tmpdir(), 'vps-stores-'));
  const { config, close } = await openTestStores(dataDir);
  return {
    config,
    async stop() {
      await close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** The same servers on a given folder, kept when they close (a later open finds what they stored). */
export async function openTestStores(
  dataDir: string,
  options: { dropTornObjects?: boolean } = {},
): Promise<{ config: Config; close(): Promise<void> }> {
  const stores = await startEmbeddedStores(dataDir, options);
  const config = loadConfig({
    LOG_LEVEL: 'silent',
    DYNAMODB_ENDPOINT: stores.dynamodbEndpoint,
    S3_ENDPOINT: stores.s3Endpoint,
    DATA_DIR: dataDir,
  });
  await ensureStorage(config);
  return { config, close: () => stores.close() };
}

/**
 * The feed administration's stores on the servers of `config` (DynamoDB tables, the S3 bucket and the
 * features in it), for use-case tests that bring their own registry, dispatcher and clock.
 */
export function feedStoresOf(config: Config) {
  const db = createDocumentClient(config);
  const objects = new S3ObjectStore(createS3Client(config), config.assetsBucket);
  return {
    feeds: new DynamoDbFeedStore(db, config.tables.feeds),
    keys: new DynamoDbKeyStore(db, config.tables.keys),
    products: new DynamoDbProductStore(db, config.tables.products),
    imports: new DynamoDbImportStore(db, config.tables.imports),
    usage: new DynamoDbUsageStore(db, config.tables.usage),
    objects,
    features: new ObjectStoreFeatureStore(objects, { cacheItems: 0 }),
  };
}
