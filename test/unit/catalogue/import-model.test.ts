/**
 * Randomized model check of runImport's crash / resume / retry / pause semantics: a feed imported under
 * injected faults, run again and again as the runner does, must end as an uninterrupted import of the
 * same file ends (or failed after exactly MAX_IMPORT_ATTEMPTS failing runs at one stored checkpoint).
 * MODEL_SEED=n runs one scenario; MODEL_RUNS=n sets how many (npm test: seeds 1–300, about 4 s). Runs of
 * 5,000 found the three bugs fixed on 2026-11-28 (a repeat naming a repeat, the kept-products note twice,
 * stale marks losing vectors and bumping versions), then nothing.
 */
import { expect, it } from 'vitest';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import type { Product } from '#lib/domain/products.ts';
import { runImport } from '#lib/ingest/run-import.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import { CATALOGUE_FEATURES_VERSION } from '#lib/vision/local-features/recipe.ts';
import { world, type World } from '#test/unit/catalogue/fakes.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';

const FEED = 'shop';
const img = (name: string) => `https://cdn.example/${name}.jpg`;

type RunPlan =
  | { kind: 'none' }
  /** The n-th import-record put of the run throws (a crash while saving). */
  | { kind: 'crash'; put: number }
  /** Every product-store write (or call, `reads`) of the run from the n-th on throws (an outage). */
  | { kind: 'store'; from: number; reads: boolean }
  /** deps.signal aborts at the n-th observed event (record put, store write, image fetch). */
  | { kind: 'pause'; at: number };

interface Scenario {
  seed: number;
  pre: string | undefined;
  /** Products of the earlier import whose stored features are of an older recipe. */
  olderRecipe: string[];
  /** Images gone since the earlier import (a moved CDN). */
  gone: string[];
  feed: string;
  mode: 'full' | 'incremental';
  files: Map<string, Buffer>;
  chunkSize: number;
  imageConcurrency: number;
  quietSaveMs: number;
  plan: RunPlan[];
}

function scenario(seed: number): Scenario {
  const r = seededRandom(seed);
  const int = (n: number) => Math.floor(r() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const pool = Array.from({ length: 3 + int(8) }, (_, i) => `p${i}`);
  const files = new Map<string, Buffer>();
  for (const id of pool)
    for (const v of ['v1', 'v2', 'x']) files.set(img(`${id}-${v}`), Buffer.from(`image ${id} ${v}`));
  const productRow = (id: string, variant = pick(['a', 'b']), image = pick(['v1', 'v1', 'v2'])) => {
    const row: Record<string, unknown> = {
      id,
      title: `Product ${id} ${variant}`,
      image_link: img(`${id}-${image}`),
      price: '10.00 USD',
    };
    if (r() < 0.15) row.additional_image_link = [img(`${id}-${pick(['x', 'gone'])}`)];
    if (r() < 0.1) row['metadata.Bad Name'] = 'x';
    return JSON.stringify(row);
  };
  let pre: string | undefined;
  if (r() < 0.6)
    pre = pool
      .filter(() => r() < 0.6)
      .map((id) => productRow(id))
      .join('\n');
  if (pre === '') pre = undefined;
  const olderRecipe = pre !== undefined && r() < 0.3 ? pool.filter(() => r() < 0.5) : [];
  const gone = r() < 0.3 ? pool.filter(() => r() < 0.4).map((id) => img(`${id}-${pick(['v1', 'v2'])}`)) : [];
  const rows: string[] = [];
  const n = 1 + int(20);
  for (let i = 0; i < n; i += 1) {
    const x = r();
    const id = pick(pool);
    if (x < 0.45) rows.push(productRow(id));
    else if (x < 0.55) rows.push(JSON.stringify({ id, image_link: img(`${id}-v1`), price: '10.00 USD' }));
    else if (x < 0.63)
      rows.push(JSON.stringify({ id, title: 't', image_link: img(`${id}-v1`), price: 'cheap' }));
    else if (x < 0.75) rows.push(productRow(id, 'a', 'missing'));
    else if (x < 0.8) rows.push(`{"id": "${id}", "ti`);
    else if (rows.length > 0) rows.push(pick(rows));
    else rows.push(productRow(id));
  }
  // A few faulty runs, a store outage of k runs among them; clean runs after (added by the runner).
  const plan: RunPlan[] = [];
  const faulty = int(7);
  for (let i = 0; i < faulty; i += 1) {
    const kind = pick(['none', 'crash', 'crash', 'store', 'pause', 'pause'] as const);
    if (kind === 'none') plan.push({ kind });
    else if (kind === 'crash') plan.push({ kind, put: 1 + int(12) });
    else if (kind === 'pause') plan.push({ kind, at: 1 + int(20) });
    else {
      const k = 1 + int(4);
      const from = 1 + int(4);
      const reads = r() < 0.4;
      for (let j = 0; j < k; j += 1) plan.push({ kind, from, reads });
    }
  }
  return {
    seed,
    pre,
    olderRecipe,
    gone,
    feed: rows.join('\n'),
    mode: r() < 0.7 ? 'full' : 'incremental',
    files,
    chunkSize: 1 + int(5),
    imageConcurrency: 1 + int(4),
    quietSaveMs: pick([0, 60_000]),
    plan,
  };
}

interface Hooks {
  event: () => void;
  restart: () => void;
  putManyCalls: number;
  storeFailsFrom: number;
  /** Reads fail too (else only writes). */
  storeEverything: boolean;
}

async function prepare(s: Scenario): Promise<{ w: World; hooks: Hooks; importId: string }> {
  const w = world(new Map(s.files));
  w.deps.limits = {
    ...w.deps.limits,
    chunkSize: s.chunkSize,
    imageConcurrency: s.imageConcurrency,
    quietSaveMs: s.quietSaveMs,
  };
  const queue = (content: string, mode: 'full' | 'incremental') =>
    startImport(
      {
        feeds: w.feeds,
        imports: w.imports,
        objects: w.objects,
        dispatcher: { dispatch: async () => undefined },
        clock: w.deps.clock,
      },
      FEED,
      { content, format: 'jsonl', mode },
    );
  if (s.pre !== undefined) {
    const earlier = await queue(s.pre, 'full');
    const done = await runImport(w.deps, FEED, earlier.importId);
    if (done.status !== 'succeeded') throw new Error(`pre-import ${done.status}: ${done.message}`);
    const older = await w.products.getMany(FEED, s.olderRecipe);
    await w.products.putMany(
      [...older.values()].map((p) => ({ ...p, local_features: CATALOGUE_FEATURES_VERSION - 1 })),
    );
  }
  for (const url of s.gone) w.fetcher.files.delete(url);
  const hooks: Hooks = {
    event: () => undefined,
    restart: () => undefined,
    putManyCalls: 0,
    storeFailsFrom: Infinity,
    storeEverything: false,
  };
  // A store outage: every call from the n-th of the run on fails (writes observed as pause points too).
  const outage = () => {
    hooks.putManyCalls += 1;
    if (hooks.putManyCalls >= hooks.storeFailsFrom) throw new Error('store unavailable');
  };
  const putMany = w.products.putMany.bind(w.products);
  w.products.putMany = async (products: Product[]) => {
    hooks.event();
    outage();
    return putMany(products);
  };
  const deleteMany = w.products.deleteMany.bind(w.products);
  w.products.deleteMany = async (feedId: string, ids: string[]) => {
    hooks.event();
    outage();
    return deleteMany(feedId, ids);
  };
  const getMany = w.products.getMany.bind(w.products);
  w.products.getMany = async (feedId: string, ids: string[]) => {
    if (hooks.storeEverything) outage();
    return getMany(feedId, ids);
  };
  const listUnseen = w.products.listUnseen.bind(w.products);
  w.products.listUnseen = async (feedId: string, importId: string) => {
    if (hooks.storeEverything) outage();
    return listUnseen(feedId, importId);
  };
  const put = w.imports.put.bind(w.imports);
  w.imports.put = async (record: ImportRecord) => {
    hooks.event();
    return put(record);
  };
  w.fetcher.before = () => hooks.event();
  // A local index keeps its writes in memory until it flushes: a run that stops (a crash, a retried
  // worker) loses what it did not flush.
  let flushed = new Map(w.index.docs);
  w.index.flush = async () => {
    flushed = new Map(w.index.docs);
  };
  hooks.restart = () => {
    w.index.docs.clear();
    for (const [id, doc] of flushed) w.index.docs.set(id, doc);
  };
  const queued = await queue(s.feed, s.mode);
  return { w, hooks, importId: queued.importId };
}

/** What an import left in the store, comparable across worlds (no uuids, timestamps or import ids). */
function productsOf(w: World, importId: string) {
  return w.products.all(FEED).map((p) => {
    const { id: _id, created_at: _c, updated_at: _u, seen_import, ...rest } = p;
    return { ...rest, seenHere: seen_import === importId };
  });
}

/** The stored local features (and any other object but the imports' own). */
function objectsOf(w: World) {
  return [...w.objects.objects.entries()]
    .filter(([key]) => !key.startsWith('imports/'))
    .map(([key, bytes]) => [key, bytes.toString('base64')])
    .sort();
}

function vectorsOf(w: World) {
  return [...w.index.docs.values()]
    .map((d) => ({ id: d.id, group: d.itemGroupId, fields: d.fields, v: [...d.vector] }))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
}

const MAX_ATTEMPTS = 3;

interface Trace {
  run: number;
  plan: RunPlan;
  outcome: string;
  stored: Pick<ImportRecord, 'status' | 'checkpointRow' | 'processed' | 'attempts'> | undefined;
}

const ends = new Map<string, number>();

/** Each "Duplicate id; row N was imported." names the row its product was stored from. */
async function duplicatesNameImportedRows(w: World, record: ImportRecord, at: string): Promise<void> {
  for (const error of record.errors) {
    const named = /^Duplicate id; row (\d+) was imported\.$/.exec(error.message);
    if (!named) continue;
    const stored = await w.products.get(FEED, error.productId!);
    expect(stored?.seen_row, `${at}: row ${error.row} names row ${named[1]}`).toBe(Number(named[1]));
  }
}

async function check(s: Scenario, trace: Trace[]): Promise<void> {
  const ref = await prepare(s);
  const expected = await runImport(ref.w.deps, FEED, ref.importId);

  const { w, hooks, importId } = await prepare(s);
  // The oracle's count of failed runs at the stored checkpoint (the record's `attempts` after the run).
  let count = 0;
  let final: ImportRecord | undefined;
  let infraFailed = false;
  const plan = [...s.plan, { kind: 'none' } as const];
  for (let run = 0; run < plan.length && !final; run += 1) {
    const step = plan[run]!;
    const before = (await w.imports.get(FEED, importId))!;
    const pause = new AbortController();
    let events = 0;
    hooks.event = () => {
      events += 1;
      if (step.kind === 'pause' && events === step.at) pause.abort();
    };
    hooks.putManyCalls = 0;
    hooks.storeFailsFrom = step.kind === 'store' ? step.from : Infinity;
    hooks.storeEverything = step.kind === 'store' && step.reads;
    const putsBefore = w.imports.puts;
    w.imports.failOnPut = step.kind === 'crash' ? putsBefore + step.put : undefined;
    let returned: ImportRecord | undefined;
    let thrown: unknown;
    try {
      returned = await runImport({ ...w.deps, signal: pause.signal }, FEED, importId);
    } catch (error) {
      thrown = error;
    }
    const crashedAtFirstPut = step.kind === 'crash' && w.imports.puts >= putsBefore + 1 && step.put === 1;
    w.imports.failOnPut = undefined;
    hooks.storeFailsFrom = Infinity;
    hooks.event = () => undefined;
    if (thrown !== undefined) hooks.restart();
    const stored = await w.imports.get(FEED, importId);
    const progressed = stored!.checkpointRow !== before.checkpointRow;
    trace.push({
      run,
      plan: step,
      outcome: returned
        ? `returned ${returned.status} ${returned.message ?? ''}`
        : `threw ${thrown instanceof Error ? thrown.message : String(thrown)}`,
      stored: stored && {
        status: stored.status,
        checkpointRow: stored.checkpointRow,
        processed: stored.processed,
        attempts: stored.attempts,
      },
    });
    const at = `seed ${s.seed} run ${run}`;
    if (returned) {
      expect(stored, `${at}: the record stored is the one returned`).toEqual(returned);
      expect(['succeeded', 'failed'], at).toContain(returned.status);
      final = returned;
      if (returned.status === 'failed' && returned.message?.startsWith('Stopped after row')) {
        infraFailed = true;
        // (The failing save stores progress that wrote nothing, kept in memory: not a stored checkpoint
        // that the run passed, so the count goes on.)
        count += 1;
        expect(count, `${at}: failed after ${MAX_ATTEMPTS} failing runs at one checkpoint`).toBe(
          MAX_ATTEMPTS,
        );
        expect(returned.message, at).toContain(`failed ${MAX_ATTEMPTS} times in a row`);
      }
      continue;
    }
    // (A crash at the run's first save leaves the record as it was, queued perhaps.)
    if (!crashedAtFirstPut)
      expect(stored?.status, `${at}: a run that threw leaves the import running`).toBe('running');
    if (pause.signal.aborted) count = progressed ? 0 : count;
    else if (crashedAtFirstPut) count = count + 0;
    else count = progressed ? 1 : count + 1;
    expect(step.kind, `${at}: a clean run ends the import`).not.toBe('none');
    expect(count, `${at}: retried below ${MAX_ATTEMPTS} failing runs`).toBeLessThan(MAX_ATTEMPTS);
    expect(stored?.attempts ?? 0, `${at}: stored attempts count the failing runs`).toBe(count);
  }
  const at = `seed ${s.seed}`;
  expect(final, `${at}: ended`).toBeDefined();
  const got = final!;
  await duplicatesNameImportedRows(ref.w, expected, `${at} (uninterrupted)`);
  await duplicatesNameImportedRows(w, got, at);
  const end = infraFailed ? 'failed: 3 failing runs' : `${got.status}`;
  ends.set(end, (ends.get(end) ?? 0) + 1);
  const keys = got.errors.map((e) => JSON.stringify(e));
  expect(new Set(keys).size, `${at}: errors once each: ${JSON.stringify(got.errors)}`).toBe(keys.length);
  if (infraFailed) return;
  const counts = (r: ImportRecord) => ({
    status: r.status,
    message: r.message,
    total: r.total,
    processed: r.processed,
    failed: r.failed,
    imported: r.embedded + r.skipped + (r.updated ?? 0),
    checkpointRow: r.checkpointRow,
  });
  expect(counts(got), `${at}: counts`).toEqual(counts(expected));
  // Known and documented: a removal batch deleted but not saved when the run died is not counted.
  expect(got.removed, `${at}: removed`).toBeLessThanOrEqual(expected.removed);
  // Known: a chunk written but not saved is redone with its products unchanged (skipped, not fetched):
  // the warnings about their additional images are not given again.
  const additional = (e: ImportRecord['errors'][number]) => e.message.startsWith('additional_image_link');
  expect(
    got.errors.filter((e) => !additional(e)),
    `${at}: errors`,
  ).toEqual(expected.errors.filter((e) => !additional(e)));
  expect(expected.errors, `${at}: additional-image warnings`).toEqual(
    expect.arrayContaining(got.errors.filter(additional)),
  );
  expect(productsOf(w, importId), `${at}: products`).toEqual(productsOf(ref.w, ref.importId));
  expect(vectorsOf(w), `${at}: vectors`).toEqual(vectorsOf(ref.w));
  expect(objectsOf(w), `${at}: features`).toEqual(objectsOf(ref.w));
  // Every stored product with vectors has them in the index (a resumed run skips unchanged ones).
  for (const p of w.products.all(FEED))
    for (let i = 0; i < p.vector_count; i += 1)
      expect(w.index.docs.has(`${FEED}/${p.product_id}/${i}`), `${at}: vectors of ${p.product_id}`).toBe(
        true,
      );
}

it('ends every faulted import as the uninterrupted one ends, or failed after 3 failing runs', async () => {
  const only = process.env.MODEL_SEED;
  const seeds = only
    ? [Number(only)]
    : Array.from({ length: Number(process.env.MODEL_RUNS ?? 300) }, (_, i) => i + 1);
  const failures: string[] = [];
  const kinds = new Map<string, number>();
  for (const seed of seeds) {
    const s = scenario(seed);
    const trace: Trace[] = [];
    try {
      await check(s, trace);
      for (const t of trace) kinds.set(t.plan.kind, (kinds.get(t.plan.kind) ?? 0) + 1);
    } catch (error) {
      failures.push(`seed ${seed}: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`);
      if (only) {
        console.log(JSON.stringify({ ...s, files: undefined, plan: undefined, trace }, null, 1));
        throw error;
      }
    }
  }
  console.log(
    `scenarios ${seeds.length}, runs by kind ${JSON.stringify(Object.fromEntries(kinds))}, ` +
      `ends ${JSON.stringify(Object.fromEntries(ends))}`,
  );
  expect(failures).toEqual([]);
});
