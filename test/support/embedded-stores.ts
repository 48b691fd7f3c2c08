import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
