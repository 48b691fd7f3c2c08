import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import { join, resolve } from 'node:path';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { type Config, loadConfig } from '#lib/config.ts';
import { configureContainer, type Container, feedAdminDeps, getContainer } from '#lib/container.ts';
import { createFeed, finishFeedDeletion } from '#lib/domain/admin/feeds.ts';
import { createKey } from '#lib/domain/admin/keys.ts';
import { ensureStorage, startEmbeddedStores } from '#lib/local/embedded-stores.ts';
import { startHttpServer } from '#lib/local/server.ts';
import { InProcessImportDispatcher } from '#lib/ingest/dispatchers.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import { processAlive } from '#lib/local/process-alive.ts';
import { startTtlSweeper } from '#lib/local/ttl-sweeper.ts';
import { bundleExtractionWorker } from '#lib/local/worker-bundle.ts';

export const DEMO_FEED_ID = 'demo';

export interface LocalStack {
  url: string;
  adminToken: string;
  config: Config;
  container: Container;
  demo: { feedId: string; searchId: string };
  /** Resolves once every import queued so far (the demo seeding included) has finished. */
  importsIdle(): Promise<void>;
  /**
   * Resolves once this start's import of the demo catalogue has finished: true when it succeeded (the
   * demo feed is searchable), false when it failed, the demo is not seeded (DEMO_SEED=false) or the
   * stack closed first.
   */
  demoSeeded(): Promise<boolean>;
  /** Resolves once local mode's removal of expired items at start has ended (lib/local/ttl-sweeper.ts). */
  expiredSwept(): Promise<void>;
  /**
   * Loads the models, the vector index and every feed's words now rather than at the first search
   * (`npm start` calls it once serving; tests and benches that measure a cold search do not).
   */
  warm(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Local mode: the embedded stores, the container configured to use them, the HTTP server over the route
 * table, and a ready demo feed with a search id. `env` overrides process.env (tests use a temp DATA_DIR
 * and port 0).
 */
export async function startLocalStack(
  env: Record<string, string | undefined> = process.env,
): Promise<LocalStack> {
  const base = loadConfig(env);
  const dataDir = resolve(base.local.dataDir);
  await mkdir(dataDir, { recursive: true });
  const { release: releaseLock, killedBefore } = await lockDataDir(dataDir);
  const adminToken = base.adminToken ?? (await persistentAdminToken(dataDir));
  const stores = await startEmbeddedStores(dataDir, { dropTornObjects: killedBefore });
  const workers = env.LOCAL_FEATURE_WORKERS ?? '1';
  // The worker runs from a plain-JS bundle of its entry when esbuild can make one (worker-bundle.ts);
  // otherwise through tsx's loader, slower to start but the same features.
  const bundled =
    workers !== '0' && env.LOCAL_FEATURE_WORKER_ENTRY === undefined
      ? await bundleExtractionWorker().then(
          (entry) => ({ entry }),
          (error: unknown) => ({ error }),
        )
      : undefined;
  const config = loadConfig({
    ...env,
    STAGE: env.STAGE ?? 'local',
    DYNAMODB_ENDPOINT: stores.dynamodbEndpoint,
    S3_ENDPOINT: stores.s3Endpoint,
    ADMIN_TOKEN: adminToken,
    VECTOR_INDEX_DIR: env.VECTOR_INDEX_DIR ?? join(dataDir, 'vectors'),
    FETCH_ALLOW_PRIVATE: env.FETCH_ALLOW_PRIVATE ?? 'true',
    IMPORT_RUNNER: env.IMPORT_RUNNER ?? 'in-process',
    // ORB off the JS thread that also serves HTTP and the embedded stores (docs/benchmarks.md).
    LOCAL_FEATURE_WORKERS: workers,
    ...(bundled && 'entry' in bundled ? { LOCAL_FEATURE_WORKER_ENTRY: bundled.entry } : {}),
  });
  configureContainer(config);
  await ensureStorage(config);
  const container = getContainer();
  if (bundled && 'error' in bundled)
    container.logger.warn('extraction worker runs through tsx: bundling it failed', {
      error: String(bundled.error),
    });
  // The extraction worker starts now and loads OpenCV while the rest starts, rather than on the first
  // image search or import (the longest part of a first search: docs/benchmarks.md "Cold start").
  container.ingest.localFeatures?.matcher().catch(() => undefined);
  await recoverFeeds(container);
  const demo = await ensureDemoFeed(container);
  let server: Server;
  let url: string;
  try {
    ({ server, url } = await startHttpServer({
      port: config.local.port,
      maxBodyBytes: config.maxBodyBytes,
      logger: container.logger,
    }));
  } catch (error) {
    await stores.close();
    await releaseLock();
    throw error;
  }
  await resumeImports(container);
  const demoImport = config.demoSeed ? await seedDemoFeed(container, url) : undefined;
  const closing = new AbortController();
  const sweeper = startTtlSweeper(createDocumentClient(config), config, {
    logger: container.logger,
    bucket: { dir: join(dataDir, 's3', config.assetsBucket), objects: container.objects },
  });
  const dispatcher =
    container.dispatcher instanceof InProcessImportDispatcher ? container.dispatcher : undefined;
  const idle = () => dispatcher?.idle() ?? Promise.resolve();
  return {
    url,
    adminToken,
    config,
    container,
    demo,
    importsIdle: idle,
    expiredSwept: () => sweeper.idle(),
    demoSeeded: () =>
      demoImport
        ? importSucceeded(container, DEMO_FEED_ID, demoImport, closing.signal)
        : Promise.resolve(false),
    warm: () => warmUp(container),
    async close() {
      closing.abort();
      // A running import pauses at its next checkpoint; the next start resumes it.
      await dispatcher?.stop();
      await sweeper.stop();
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
      await container.close();
      await stores.close();
      await releaseLock();
    },
  };
}

/**
 * Loads, in the background of a started server, what a first search would: the models, the vector index
 * and every feed's visual words (a large feed's rows and bucket tables only: ~0.1 s at 100k products,
 * docs/benchmarks.md "Words on disk"). A failure is left to the search that meets it, which reports it as
 * it would have.
 */
async function warmUp(c: Container): Promise<void> {
  await Promise.allSettled([
    c.vision(),
    c.vectors(),
    (async () => {
      for (const feed of await c.feeds.list()) await c.visualWords.preload?.(feed.feedId);
    })(),
  ]);
}

/**
 * The embedded databases allow one process per folder; a second `npm start` on the same folder gets a
 * clear message instead of a LevelDB lock error deep inside the DynamoDB server.
 */
async function lockDataDir(dataDir: string): Promise<{ release(): Promise<void>; killedBefore: boolean }> {
  const file = join(dataDir, 'server.pid');
  const holder = Number(await readFile(file, 'utf8').catch(() => ''));
  if (holder && holder !== process.pid && processAlive(holder)) {
    throw new Error(
      `${dataDir} is in use by process ${holder} (another npm start?). Stop it or set DATA_DIR.`,
    );
  }
  await writeFile(file, String(process.pid));
  // A clean stop removes the file: one left by a dead process means that run was killed.
  return { release: () => rm(file, { force: true }), killedBefore: holder > 0 };
}

/** The admin token survives restarts so an open dashboard session stays valid. */
async function persistentAdminToken(dataDir: string): Promise<string> {
  const file = join(dataDir, 'admin-token');
  const existing = await readFile(file, 'utf8').then(
    (text) => text.trim(),
    () => '',
  );
  if (existing.length >= 16) return existing;
  const token = `adm_${randomBytes(24).toString('base64url')}`;
  await writeFile(file, `${token}\n`, { mode: 0o600 });
  return token;
}

/** A demo feed with one live search id, created on first start and reused afterwards. */
async function ensureDemoFeed(c: Container): Promise<{ feedId: string; searchId: string }> {
  const deps = { ...c, planLimits: c.config.planLimits };
  if (!(await c.feeds.get(DEMO_FEED_ID))) {
    await createFeed(deps, {
      feedId: DEMO_FEED_ID,
      name: 'Demo catalogue',
      plan: 'pro',
      domains: [],
      requireOrigin: false,
    });
  }
  const live = (await c.keys.listByFeed(DEMO_FEED_ID)).find((key) => !key.revokedAt);
  const key = live ?? (await createKey(deps, DEMO_FEED_ID, { name: 'demo' }));
  return { feedId: DEMO_FEED_ID, searchId: key.searchId };
}

/**
 * Queues a full import of the committed demo catalogue (demo/feed.xml, served by this server). It runs in
 * the background; on a restart every product is unchanged, so nothing is fetched or embedded again.
 */
async function seedDemoFeed(c: Container, url: string): Promise<string> {
  const queued = await startImport(c, DEMO_FEED_ID, {
    url: `${url}/demo/feed.xml`,
    format: 'xml',
    mode: 'full',
  });
  return queued.importId;
}

/** Whether an import succeeded, once it has finished (read every 100 ms); false when `signal` ends it. */
async function importSucceeded(
  c: Container,
  feedId: string,
  importId: string,
  signal: AbortSignal,
): Promise<boolean> {
  while (!signal.aborted) {
    const record = await c.imports.get(feedId, importId).catch(() => 'unread' as const);
    if (record === undefined) return false; // (its feed deleted meanwhile, the record with it)
    if (record !== 'unread' && record.status === 'succeeded') return true;
    if (record !== 'unread' && record.status === 'failed') return false;
    await new Promise((resolve) => setTimeout(resolve, 100).unref());
  }
  return false;
}

/**
 * What a killed run left half done, before anything else uses the feeds: the feeds' leases are given up
 * (only this process uses this data folder, and a lease of a killed one would hold its feed for
 * FEED_LEASE_MS), and deletions of feeds that were stopped part way are finished.
 */
async function recoverFeeds(c: Container): Promise<void> {
  // Every lease, also of a feed whose deletion was killed after removing the feed but before giving up.
  for (const feedId of await c.imports.leasedFeeds()) await c.imports.releaseLease(feedId);
  for (const feed of await c.feeds.list()) {
    if (feed.deletingAt) {
      await finishFeedDeletion(feedAdminDeps(c), feed.feedId);
      c.logger.info('feed deletion finished', { feedId: feed.feedId });
    }
  }
}

/**
 * Imports a previous run left queued or running (stopped mid-way) resume from their checkpoint, each
 * feed's in creation order.
 */
async function resumeImports(c: Container): Promise<void> {
  for (const feed of await c.feeds.list()) {
    const [oldest] = await c.imports.listUnfinished(feed.feedId);
    if (oldest) await c.dispatcher.dispatch(feed.feedId, oldest.importId);
  }
}
