/**
 * Randomized model check of a feed's deletion racing its imports: an import of feed F, deleteFeed(F) and
 * the runner's jobs (a repeated import trigger, the deletion handed over, a second import started, a new
 * feed created under the id F with its own import, an import of an unrelated feed G) run interleaved by a
 * seeded scheduler that releases one store call at a time, with crashes of either side (a process that
 * dies at its n-th store call, before or after it) and lease expiry (a runner stalled past its lease).
 * Then the runner does what is left (each trigger under imports/, a repeated DELETE of a feed left marked)
 * and the stores must hold nothing of the deleted feed, and of the new feed of the same id and of G
 * exactly what uninterrupted imports of their own files give. MODEL_SEED=n runs one scenario (and prints
 * its trace); MODEL_RUNS=n sets how many, from MODEL_FROM (npm test: seeds 1–100, about 6 s). Runs of
 * 1,000 found nothing; MODEL_STALL=1 adds processes frozen past their lease (a Lambda stalled), which
 * finds the lease-fencing limits noted at `stalls` below.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { expect, it } from 'vitest';
import { createFeed, deleteFeed, type FeedAdminDeps, finishFeedDeletion } from '#lib/domain/admin/feeds.ts';
import { FEED_DELETION_JOB, importOfRequestKey } from '#lib/domain/catalogue/imports.ts';
import { DomainError, NotFoundError } from '#lib/domain/errors.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import { featuresPrefix } from '#lib/adapters/object-store-feature-store.ts';
import { runFeedJob } from '#lib/ingest/feed-jobs.ts';
import { ImportDeferred } from '#lib/ingest/run-import.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import type { FeedStore, KeyStore, VisualWordDocument, VisualWordHit, VisualWordIndex } from '#lib/ports.ts';
import { world, type World } from '#test/unit/catalogue/fakes.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';

const F = 'shop';
const outcomes = new Map<string, number>();
let steps = 0;
const G = 'other';

class MemoryFeedStore implements FeedStore {
  readonly feeds = new Map<string, Feed>();
  async create(feed: Feed) {
    if (this.feeds.has(feed.feedId)) throw new DomainError('conflict', `Feed ${feed.feedId} exists.`);
    this.feeds.set(feed.feedId, structuredClone(feed));
  }
  async get(feedId: string) {
    const feed = this.feeds.get(feedId);
    return feed && structuredClone(feed);
  }
  async list() {
    return [...this.feeds.values()].map((feed) => structuredClone(feed));
  }
  async put(feed: Feed) {
    const stored = this.feeds.get(feed.feedId);
    if (!stored || stored.deletingAt || stored.createdAt !== feed.createdAt)
      throw new NotFoundError('feed_not_found', `Feed ${feed.feedId} not found.`);
    this.feeds.set(feed.feedId, structuredClone(feed));
  }
  async markDeleting(feedId: string, at: Date, createdAt?: string) {
    const stored = this.feeds.get(feedId);
    if (!stored || (createdAt !== undefined && stored.createdAt !== createdAt))
      throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
    stored.deletingAt ??= at.toISOString();
  }
  async delete(feedId: string, createdAt?: string) {
    if (createdAt === undefined || this.feeds.get(feedId)?.createdAt === createdAt) this.feeds.delete(feedId);
  }
}

class MemoryWordIndex implements VisualWordIndex {
  readonly docs = new Map<string, VisualWordDocument>();
  async upsert(documents: VisualWordDocument[]) {
    for (const d of documents) this.docs.set(d.id, d);
  }
  async deleteProducts(feedId: string, productIds: string[], except: readonly string[] = []) {
    for (const [id, d] of this.docs)
      if (d.feedId === feedId && productIds.includes(d.productId) && !except.includes(id))
        this.docs.delete(id);
  }
  async deleteFeed(feedId: string) {
    for (const [id, d] of this.docs) if (d.feedId === feedId) this.docs.delete(id);
  }
  async search(): Promise<VisualWordHit[]> {
    return [];
  }
  async flush() {}
}

/** One side of the race: a request or a runner, which may die at its n-th store call. */
interface Actor {
  name: string;
  calls: number;
  crashAt?: number;
  /** Dies right after its crashAt-th call was done (its answer lost) rather than before it. */
  crashAfter: boolean;
  dead: boolean;
  done: boolean;
  outcome?: string;
}

const never = () => new Promise<never>(() => undefined);

/**
 * Every store call of an actor waits here until the scheduler releases it, one at a time in a seeded
 * order; a dead actor's calls never return (a process that died does nothing more, nor lets go of its
 * lease). Calls outside an actor (setup, the runner afterwards) pass at once.
 */
class Scheduler {
  readonly als = new AsyncLocalStorage<Actor>();
  pending: { actor: Actor; release: () => void }[] = [];
  async gate(): Promise<void> {
    const actor = this.als.getStore();
    if (!actor) return;
    if (actor.dead) return never();
    actor.calls += 1;
    if (actor.calls === actor.crashAt && !actor.crashAfter) {
      actor.dead = true;
      return never();
    }
    await new Promise<void>((release) => this.pending.push({ actor, release }));
  }
  async after(): Promise<void> {
    const actor = this.als.getStore();
    if (!actor) return;
    if (actor.dead || (actor.crashAfter && actor.calls >= actor.crashAt!)) {
      actor.dead = true;
      return never();
    }
  }
  gateMethods<T extends object>(target: T, names: (keyof T & string)[]): void {
    for (const name of names) {
      const original = (target[name] as (...args: unknown[]) => Promise<unknown>).bind(target);
      (target as Record<string, unknown>)[name] = async (...args: unknown[]) => {
        await this.gate();
        const result = await original(...args);
        await this.after();
        return result;
      };
    }
  }
}

const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Built {
  w: World;
  feeds: MemoryFeedStore;
  words: MemoryWordIndex;
  admin: FeedAdminDeps;
  advance(ms: number): void;
}

function build(
  sched: Scheduler | undefined,
  chunkSize: number,
  quietSaveMs: number,
  files: Map<string, Buffer>,
) {
  const w = world(files);
  const feeds = new MemoryFeedStore();
  const words = new MemoryWordIndex();
  // 1 ms a call: no lease lapses unless the model moves the clock (a stalled runner).
  let tick = Date.parse('2026-11-22T00:00:00Z');
  const clock = { now: () => new Date((tick += 1)) };
  w.deps.clock = clock;
  w.deps.feeds = feeds;
  w.deps.localFeatures = { ...w.deps.localFeatures!, words };
  w.deps.limits = { ...w.deps.limits, chunkSize, imageConcurrency: 2, quietSaveMs };
  const keys = { listByFeed: async () => [], deleteByFeed: async () => undefined } as unknown as KeyStore;
  const admin: FeedAdminDeps = {
    feeds,
    keys,
    products: w.products,
    imports: w.imports,
    // The feed's lease is never waited for: a held one hands the deletion over (or defers its job) at once.
    leaseWaitMs: 0,
    objects: w.objects,
    features: w.features,
    usage: { deleteFeed: async () => undefined },
    feedVectors: async () => w.index,
    visualWords: words,
    apiKeys: { register: async () => undefined, unregister: async () => undefined },
    dispatcher: { dispatch: async () => undefined },
    deletionBudgetMs: 1e9,
    clock,
    planLimits: { free: 100, pro: 1000, enterprise: 10_000 },
  };
  if (sched) {
    sched.gateMethods(feeds, ['create', 'get', 'markDeleting', 'delete']);
    sched.gateMethods(w.products, ['get', 'putMany', 'deleteMany', 'listUnseen', 'deleteFeed']);
    sched.gateMethods(w.imports, [
      'create',
      'get',
      'put',
      'delete',
      'deleteFeed',
      'listUnfinished',
      'takeLease',
      'renewLease',
      'releaseLease',
    ]);
    sched.gateMethods(w.objects, ['put', 'get', 'delete', 'deleteMany', 'list', 'read', 'write']);
    sched.gateMethods(w.index, ['upsert', 'deleteProducts', 'deleteFeed', 'getVectors', 'flush']);
    sched.gateMethods(words, ['upsert', 'deleteProducts', 'deleteFeed']);
    w.fetcher.before = () => sched.gate();
  }
  const built: Built = { w, feeds, words, admin, advance: (ms) => void (tick += ms) };
  return built;
}

const img = (feed: string, name: string) => `https://cdn.example/${feed}/${name}.jpg`;

function feedFile(r: () => number, feed: string, files: Map<string, Buffer>): string {
  const int = (n: number) => Math.floor(r() * n);
  const rows: string[] = [];
  const n = 1 + int(7);
  for (let i = 0; i < n; i += 1) {
    const id = `p${int(6)}`;
    const variant = int(2);
    const url = img(feed, `${id}-${variant}`);
    if (r() < 0.85) files.set(url, Buffer.from(`image ${feed} ${id} ${variant}`));
    const row: Record<string, unknown> = { id, title: `${id} ${int(2)}`, image_link: url, price: '1.00 USD' };
    if (r() < 0.3) {
      const extra = img(feed, `${id}-x`);
      files.set(extra, Buffer.from(`extra ${feed} ${id}`));
      row.additional_image_link = [extra];
    }
    rows.push(JSON.stringify(row));
  }
  return rows.join('\n');
}

interface Scenario {
  seed: number;
  files: Map<string, Buffer>;
  chunkSize: number;
  quietSaveMs: number;
  /** F's products before the raced import (an earlier import's). */
  preF?: string;
  fileF: string;
  mode: 'full' | 'incremental';
  preG?: string;
  /** G's import running alongside. */
  fileG?: string;
  /** A second import of F started during the race. */
  secondF?: string;
  /** The feed created again under the id F once it is gone, and its import. */
  recreate?: string;
  starts: Record<string, number>;
  crashes: Record<string, { at: number; after: boolean }>;
  /** Scheduler steps at which one process freezes while the clock passes every lease (MODEL_STALL). */
  stalls: number[];
}

function scenario(seed: number): Scenario {
  const r = seededRandom(seed);
  const int = (n: number) => Math.floor(r() * n);
  const files = new Map<string, Buffer>();
  const s: Scenario = {
    seed,
    files,
    chunkSize: 1 + int(3),
    quietSaveMs: r() < 0.5 ? 0 : 60_000,
    fileF: '',
    mode: r() < 0.7 ? 'full' : 'incremental',
    starts: {},
    crashes: {},
    stalls: [],
  };
  if (r() < 0.5) s.preF = feedFile(r, F, files);
  s.fileF = feedFile(r, F, files);
  if (r() < 0.5) s.preG = feedFile(r, G, files);
  if (r() < 0.6) s.fileG = feedFile(r, G, files);
  if (r() < 0.3) s.secondF = feedFile(r, F, files);
  if (r() < 0.5) s.recreate = feedFile(r, `${F}-new`, files);
  s.starts.delete = int(60);
  if (r() < 0.3) s.starts.retry = int(80);
  if (r() < 0.3) s.starts.finisher = int(80);
  if (s.fileG !== undefined) s.starts.importG = int(40);
  // (Before the deletion: started later it may be an import of the feed created again.)
  if (s.secondF !== undefined) s.starts.second = int(s.starts.delete + 1);
  if (s.recreate !== undefined) s.starts.recreate = int(80);
  for (const name of ['import', 'delete', 'retry', 'finisher'])
    if (r() < 0.25) s.crashes[name] = { at: 1 + int(40), after: r() < 0.5 };
  // Stalls only on request: they find the lease-fencing limits reported on 2026-11-28 (a process frozen
  // past its lease writes on after another took over, even into a feed created again under the id).
  if (process.env.MODEL_STALL) {
    s.stalls = [int(150), int(150)];
    s.recreate ??= feedFile(r, `${F}-new`, files);
    s.starts.recreate ??= int(80);
    s.starts.finisher ??= int(80);
  }
  return s;
}

async function queue(b: Built, feedId: string, content: string, mode: 'full' | 'incremental') {
  const deps = { ...b.w.deps, imports: b.w.imports, objects: b.w.objects, dispatcher: b.admin.dispatcher };
  return startImport(deps, feedId, { content, format: 'jsonl', mode });
}

const feedInput = (feedId: string) => ({
  feedId,
  name: feedId,
  plan: 'free' as const,
  domains: [],
  requireOrigin: false,
});

/** Everything stored for `feedId`, comparable across worlds (no uuids, timestamps or import ids). */
function stateOf(b: Built, feedId: string) {
  const products = b.w.products.all(feedId).map((p) => {
    const { id: _id, created_at: _c, updated_at: _u, seen_import: _s, ...rest } = p;
    return rest;
  });
  const vectors = [...b.w.index.docs.values()]
    .filter((d) => d.feedId === feedId)
    .map((d) => ({ id: d.id, group: d.itemGroupId, fields: d.fields, v: [...d.vector] }))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
  const words = [...b.words.docs.values()]
    .filter((d) => d.feedId === feedId)
    .map((d) => JSON.stringify(d))
    .sort();
  const features = [...b.w.objects.objects.entries()]
    .filter(([key]) => key.startsWith(featuresPrefix(feedId)))
    .map(([key, bytes]) => [key, bytes.toString('base64')])
    .sort();
  return { products, vectors, words, features };
}

/** Runs an import job to its end outside the race (the reference worlds, the setup). */
async function importNow(b: Built, feedId: string, content: string, mode: 'full' | 'incremental') {
  const record = await queue(b, feedId, content, mode);
  await runFeedJob({ ingest: b.w.deps, admin: b.admin }, feedId, record.importId);
  return record.importId;
}

/** What uninterrupted imports of these files leave for `feedId`, and how they end. */
async function reference(s: Scenario, feedId: string, contents: [string, 'full' | 'incremental'][]) {
  const b = build(undefined, s.chunkSize, s.quietSaveMs, new Map(s.files));
  await createFeed(b.admin, feedInput(feedId));
  for (const [content, mode] of contents) await importNow(b, feedId, content, mode);
  return { ...stateOf(b, feedId), imports: importsOf(b, feedId) };
}

/** The feed's import records as they ended (status, message, counts), oldest first. */
function importsOf(b: Built, feedId: string) {
  return [...b.w.imports.rows.values()]
    .filter((i) => i.feedId === feedId)
    .sort((x, y) => (x.importId < y.importId ? -1 : 1))
    .map((i) => ({
      status: i.status,
      message: i.message,
      processed: i.processed,
      embedded: i.embedded,
      skipped: i.skipped,
      failed: i.failed,
    }));
}

/** Errors a side of the race may end with: the feed gone, or the feed's lease held (retried later). */
function expected(error: unknown): boolean {
  if (error instanceof ImportDeferred) return true;
  if (error instanceof NotFoundError) return true;
  return false;
}

async function check(s: Scenario, trace: string[]): Promise<void> {
  const at = `seed ${s.seed}`;
  const sched = new Scheduler();
  const b = build(sched, s.chunkSize, s.quietSaveMs, new Map(s.files));
  const jobs = { ingest: b.w.deps, admin: b.admin };
  await createFeed(b.admin, feedInput(F));
  await createFeed(b.admin, feedInput(G));
  if (s.preF !== undefined) await importNow(b, F, s.preF, 'full');
  if (s.preG !== undefined) await importNow(b, G, s.preG, 'full');
  const importF = await queue(b, F, s.fileF, s.mode);
  const importG = s.fileG !== undefined ? await queue(b, G, s.fileG, 'full') : undefined;
  let recreated: Feed | undefined;

  const r = seededRandom(s.seed * 7919 + 1);
  const actors: Actor[] = [];
  const launch = (name: string, body: () => Promise<string>) => {
    const crash = s.crashes[name];
    const actor: Actor = {
      name,
      calls: 0,
      ...(crash ? { crashAt: crash.at } : {}),
      crashAfter: crash?.after ?? false,
      dead: false,
      done: false,
    };
    actors.push(actor);
    trace.push(`start ${name}`);
    void sched.als
      .run(actor, async () => {
        try {
          actor.outcome = await body();
        } catch (error) {
          const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
          actor.outcome = `threw ${what}`;
          if (!expected(error)) throw new Error(`${at}: ${name} ${actor.outcome}`, { cause: error });
        } finally {
          actor.done = true;
        }
      })
      .catch((error: unknown) => unexpected.push(error instanceof Error ? error.message : String(error)));
  };
  const unexpected: string[] = [];
  const job = async (feedId: string, jobId: string) => {
    const record = await runFeedJob(jobs, feedId, jobId);
    return record ? `${record.status} ${record.message ?? ''}` : 'no record';
  };
  const starts: [number, string, () => Promise<string>][] = [[0, 'import', () => job(F, importF.importId)]];
  starts.push([s.starts.delete!, 'delete', async () => deleteFeed(b.admin, F)]);
  if (s.starts.retry !== undefined) starts.push([s.starts.retry, 'retry', () => job(F, importF.importId)]);
  if (s.starts.finisher !== undefined)
    starts.push([s.starts.finisher, 'finisher', () => job(F, FEED_DELETION_JOB)]);
  if (importG) starts.push([s.starts.importG!, 'importG', () => job(G, importG.importId)]);
  if (s.secondF !== undefined)
    starts.push([
      s.starts.second!,
      'second',
      async () => job(F, (await queue(b, F, s.secondF!, 'incremental')).importId),
    ]);
  if (s.recreate !== undefined)
    starts.push([
      s.starts.recreate!,
      'recreate',
      async () => {
        // As a client would: create it again until the old one is gone (then a few tries more).
        for (let attempt = 0; attempt < 30; attempt += 1) {
          try {
            await createFeed(b.admin, feedInput(F));
          } catch (error) {
            if (error instanceof DomainError && error.code === 'conflict') continue;
            throw error;
          }
          recreated = (await b.feeds.get(F))!;
          return `recreated, import ${await job(F, (await queue(b, F, s.recreate!, 'full')).importId)}`;
        }
        return 'not recreated';
      },
    ]);

  // The timers of the race's processes (feed watches, lease renewals): a dead one's die with it.
  const timers: ReturnType<typeof setInterval>[] = [];
  const setIntervalBefore = globalThis.setInterval;
  globalThis.setInterval = ((...args: Parameters<typeof setInterval>) => {
    const timer = setIntervalBefore(...args);
    timers.push(timer);
    return timer;
  }) as typeof setInterval;
  try {
    await race();
  } finally {
    globalThis.setInterval = setIntervalBefore;
    for (const timer of timers) clearInterval(timer);
  }
  async function race() {
    const MAX_STEPS = 20_000;
    let frozen: Actor | undefined;
    let frozenUntil = 0;
    for (let step = 0; ; step += 1) {
      for (const [when, name, body] of starts) if (when === step) launch(name, body);
      await settle();
      if (s.stalls.includes(step) && sched.pending.length > 0) {
        // One process stalls (a frozen function) past every lease while the others go on.
        frozen = sched.pending[Math.floor(r() * sched.pending.length)]!.actor;
        frozenUntil = step + 1 + Math.floor(r() * 300);
        trace.push(`step ${step}: ${frozen.name} stalls past every lease until step ${frozenUntil}`);
        b.advance(11 * 60_000);
      }
      const ready = sched.pending.filter((p) => p.actor !== frozen || step >= frozenUntil);
      if (ready.length === 0) {
        if (starts.some(([when]) => when > step) || sched.pending.length > 0) continue;
        break;
      }
      expect(step, `${at}: the race ends`).toBeLessThan(MAX_STEPS);
      const chosen = ready[Math.floor(r() * ready.length)]!;
      const [next] = sched.pending.splice(sched.pending.indexOf(chosen), 1);
      next!.release();
      steps += 1;
    }
  }
  for (const actor of actors) {
    const ended = (actor.outcome ?? '').replace(/[0-9a-f_]{8,}|\d+/g, '#').slice(0, 70);
    const kind = `${actor.name}: ${actor.dead ? 'died' : ended}`;
    outcomes.set(kind, (outcomes.get(kind) ?? 0) + 1);
    trace.push(`${actor.name}: ${actor.dead ? `died at call ${actor.calls}` : actor.outcome}`);
    expect(actor.dead || actor.done, `${at}: ${actor.name} waits on nothing the model knows`).toBe(true);
  }
  expect(unexpected, `${at}: unexpected errors`).toEqual([]);

  // The runner afterwards: every lease lapsed (a dead process's too), each trigger run, a DELETE of a feed
  // left marked repeated (its request died before it handed over), the new feed created if it was not yet.
  for (let round = 0; round < 4; round += 1) {
    b.advance(11 * 60_000);
    const stored = await b.feeds.get(F);
    // (Also one that died before it marked the feed: its client saw no answer.)
    if (stored && stored.createdAt !== recreated?.createdAt) {
      trace.push(`repeat DELETE: ${await deleteFeed(b.admin, F)}`);
    }
    if (s.recreate !== undefined && !recreated && !(await b.feeds.get(F))) {
      await createFeed(b.admin, feedInput(F));
      recreated = (await b.feeds.get(F))!;
      await queue(b, F, s.recreate, 'full');
      trace.push('recreated after the race');
    }
    for (const key of await b.w.objects.list('imports/')) {
      const named = importOfRequestKey(key);
      if (!named) continue;
      try {
        await runFeedJob(jobs, named.feedId, named.importId);
      } catch (error) {
        if (!(error instanceof ImportDeferred)) throw error;
        trace.push(`deferred ${key}`);
      }
    }
  }
  expect(await finishFeedDeletion(b.admin, F)).toBe(true);

  // Nothing of the deleted feed is left; what is stored under its id is the new feed's alone.
  const feed = await b.feeds.get(F);
  if (recreated) {
    expect(feed, `${at}: the new feed`).toEqual(recreated);
    const imports = [...b.w.imports.rows.values()].filter((i) => i.feedId === F);
    expect(
      imports.map((i) => i.feedCreatedAt),
      `${at}: only the new feed's import`,
    ).toEqual([recreated.createdAt]);
    const own = imports.map((i) => `imports/${F}/${i.importId}/`);
    const leftover = (await b.w.objects.list(`imports/${F}/`)).filter(
      (key) => !own.some((prefix) => key.startsWith(prefix)),
    );
    expect(leftover, `${at}: feed files of the deleted feed`).toEqual([]);
    expect({ ...stateOf(b, F), imports: importsOf(b, F) }, `${at}: the new feed's data`).toEqual(
      await reference(s, F, [[s.recreate!, 'full']]),
    );
  } else {
    expect(feed, `${at}: the feed is gone`).toBeUndefined();
    expect(
      [...b.w.imports.rows.values()].filter((i) => i.feedId === F),
      `${at}: import records`,
    ).toEqual([]);
    expect(await b.w.objects.list(`imports/${F}/`), `${at}: feed files`).toEqual([]);
    expect(stateOf(b, F), `${at}: data of the deleted feed`).toEqual({
      products: [],
      vectors: [],
      words: [],
      features: [],
    });
  }
  // G is as its own imports alone leave it.
  const ofG: [string, 'full' | 'incremental'][] = [];
  if (s.preG !== undefined) ofG.push([s.preG, 'full']);
  if (s.fileG !== undefined) ofG.push([s.fileG, 'full']);
  expect({ ...stateOf(b, G), imports: importsOf(b, G) }, `${at}: the other feed's data`).toEqual(
    await reference(s, G, ofG),
  );
}

it('leaves nothing of a feed deleted mid-import, and other feeds as their imports made them', async () => {
  const only = process.env.MODEL_SEED;
  const seeds = only
    ? [Number(only)]
    : Array.from(
        { length: Number(process.env.MODEL_RUNS ?? 100) },
        (_, i) => i + Number(process.env.MODEL_FROM ?? 1),
      );
  const failures: string[] = [];
  for (const seed of seeds) {
    const s = scenario(seed);
    const trace: string[] = [];
    try {
      await check(s, trace);
    } catch (error) {
      failures.push(`seed ${seed}: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`);
      if (only) {
        console.log(JSON.stringify({ ...s, files: undefined }, null, 1), trace.join('\n'));
        throw error;
      }
    }
  }
  console.log(
    [...outcomes]
      .sort()
      .map(([k, n]) => `${n}\t${k}`)
      .join('\n'),
    `\nsteps ${steps}`,
  );
  expect(failures).toEqual([]);
}, 3_600_000);
