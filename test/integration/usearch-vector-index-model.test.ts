import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type GraphQuantization, UsearchVectorIndex } from '#lib/adapters/usearch-vector-index.ts';
import type { VectorDocument, VectorFilter, VectorHit, VectorQuery } from '#lib/ports.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';

/**
 * A model check of the local vector index: random operation sequences applied to the adapter and to a
 * brute-force reference of the VectorIndex port's contract (lib/ports.ts), compared after every step.
 * A failure names its seed: `MODEL_SEED=<seed> npx vitest run <this file>` replays that scenario alone.
 * npm test runs seeds 1–80 (about 5 s); `MODEL_RUNS=<n>` runs more (300 found no failure, 2026-11-28).
 */

const DIMENSION = 8;
const FEEDS = ['f1', 'f2', 'f3'];
const FIELD_NAMES = ['color', 'brand', 'size', 'metadata.season'];
const VALUES = ['Red', 'blue', 'GREEN', 'x', 'y'];
/** Keys no document holds, some of them `Object.prototype` members: they must match nothing. */
const ODD_KEYS = ['toString', 'constructor', 'material'];
/** Scores the adapter computes in double from the same f32 values; only rounding may differ. */
const SCORE_EPSILON = 1e-5;

interface Doc {
  id: string;
  feedId: string;
  productId: string;
  itemGroupId: string;
  vector: Float32Array;
  fields: Record<string, string[]>;
}

/** The contract, by brute force: documents by id, every query a full scan. */
class Reference {
  docs = new Map<string, Doc>();

  clone(): Reference {
    const copy = new Reference();
    copy.docs = new Map(this.docs);
    return copy;
  }

  upsert(documents: VectorDocument[]): void {
    for (const document of documents) {
      const fields: Record<string, string[]> = {};
      for (const [key, values] of Object.entries(document.fields))
        if (values.length > 0) fields[key] = [...new Set(values.map((value) => value.toLowerCase()))];
      this.docs.set(document.id, { ...document, vector: document.vector.slice(), fields });
    }
  }

  deleteProducts(feedId: string, productIds: string[], except: readonly string[]): void {
    for (const [id, document] of this.docs)
      if (document.feedId === feedId && productIds.includes(document.productId) && !except.includes(id))
        this.docs.delete(id);
  }

  deleteFeed(feedId: string): void {
    for (const [id, document] of this.docs) if (document.feedId === feedId) this.docs.delete(id);
  }

  count(feedId: string): number {
    return [...this.docs.values()].filter((document) => document.feedId === feedId).length;
  }

  /** Every document the query may return, best first (ties by productId, then id), unlimited by k. */
  ranked(query: VectorQuery): VectorHit[] {
    const excluded = new Set(query.excludeItemGroupIds ?? []);
    const matches = (document: Doc): boolean =>
      Object.entries(query.filter ?? {}).every(
        ([key, values]) =>
          values.length === 0 ||
          (Object.hasOwn(document.fields, key) &&
            document.fields[key]!.some((value) => values.map((v) => v.toLowerCase()).includes(value))),
      );
    return [...this.docs.values()]
      .filter((document) => document.feedId === query.feedId)
      .filter((document) => !excluded.has(document.itemGroupId) && matches(document))
      .map((document) => ({
        id: document.id,
        productId: document.productId,
        itemGroupId: document.itemGroupId,
        similarity: dot(document.vector, query.vector),
      }))
      .sort(byRank);
  }
}

function dot(a: Float32Array, b: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < a.length; i += 1) sum += a[i]! * b[i]!;
  return Math.max(-1, Math.min(1, sum));
}

function byRank(a: VectorHit, b: VectorHit): number {
  if (a.similarity !== b.similarity) return b.similarity - a.similarity;
  if (a.productId !== b.productId) return a.productId < b.productId ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

interface Config {
  quantization: GraphQuantization;
  exactThreshold: number;
  scanRatio: number;
  /** Products per feed: past ~130 live documents a filtered query can walk the graph instead of scanning. */
  products: number;
}

/** One scenario: its operations, as a log a failure prints (the minimised sequence to replay). */
/** Neighbours the graph paths found, of those they should have: the recall the model asserts a floor on. */
const recall = { found: 0, wanted: 0 };

async function scenario(seed: number, steps: number): Promise<void> {
  const random = seededRandom(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const chance = (p: number): boolean => random() < p;
  const config: Config = {
    quantization: pick(['f32', 'f32', 'i8'] as const),
    exactThreshold: pick([0, 8, 4096]),
    scanRatio: pick([0, 2]),
    products: pick([6, 20, 200]),
  };
  const dir = await mkdtemp(join(tmpdir(), 'vector-model-'));
  const open = (quantization = config.quantization): UsearchVectorIndex =>
    new UsearchVectorIndex({
      dir,
      dimension: DIMENSION,
      quantization,
      exactThreshold: config.exactThreshold,
      scanRatio: config.scanRatio,
    });
  let index = open();
  let reference = new Reference();
  /** What the disk holds as of the last flush (a deleted feed's files go at once). */
  let durable = new Reference();
  /** Vectors handed out so far: reused now and then, for exact ties. */
  const pool: Float32Array[] = [];
  const log: string[] = [`seed ${seed} ${JSON.stringify(config)}`];

  const vector = (): Float32Array => {
    if (pool.length > 0 && chance(0.25)) return pick(pool);
    // Coordinates on a coarse grid now and then: distinct vectors with equal similarities.
    const coarse = chance(0.3);
    const values = Float32Array.from({ length: DIMENSION }, () =>
      coarse ? Math.round(random() * 4 - 2) : random() * 2 - 1,
    );
    if (values.every((value) => value === 0)) values[0] = 1;
    const norm = Math.hypot(...values);
    const unit = values.map((value) => value / norm);
    pool.push(unit);
    return unit;
  };
  const fields = (): Record<string, string[]> => {
    const out: Record<string, string[]> = {};
    for (const name of FIELD_NAMES)
      if (chance(0.7)) out[name] = Array.from({ length: chance(0.8) ? 1 : 2 }, () => pick(VALUES));
    return out;
  };
  const product = (): string => `p${Math.floor(random() * config.products)}`;
  const document = (feedId: string): VectorDocument => {
    const productId = product();
    // Item groups of a few products each, and now and then a product filed under another group.
    const group = `g${Math.floor(Number(productId.slice(1)) / 3) + (chance(0.1) ? 1 : 0)}`;
    return {
      id: `${feedId}/${productId}/${Math.floor(random() * 3)}`,
      feedId,
      productId,
      itemGroupId: group,
      vector: vector(),
      fields: fields(),
    };
  };
  const query = (): VectorQuery => {
    const feedId = pick(FEEDS);
    const q: VectorQuery = { feedId, vector: vector(), k: Math.floor(random() * (config.products + 4)) };
    if (chance(0.5)) {
      const filter: VectorFilter = {};
      const keys = Math.floor(random() * 3);
      for (let i = 0; i < keys; i += 1)
        filter[chance(0.1) ? pick(ODD_KEYS) : pick(FIELD_NAMES)] = Array.from(
          { length: Math.floor(random() * 3) },
          () => pick(VALUES).toLowerCase(),
        );
      q.filter = filter;
    }
    if (chance(0.3))
      q.excludeItemGroupIds = Array.from(
        { length: 1 + Math.floor(random() * 3) },
        () => `g${Math.floor((random() * config.products) / 3)}`,
      );
    return q;
  };
  const describeQuery = (q: VectorQuery): string =>
    JSON.stringify({ ...q, vector: [...q.vector].map((value) => Number(value.toFixed(4))) });

  /** Fails with the operations so far (the sequence to replay) and what went wrong. */
  const fail = (what: string): never => {
    throw new Error(`${log.join('\n')}\n${what}`);
  };

  const check = (q: VectorQuery, hits: VectorHit[], what: string): void => {
    const ranked = reference.ranked(q);
    const expected = ranked.slice(0, Math.max(0, Math.floor(q.k)));
    const asked = `${what} ${describeQuery(q)}`;
    const shown = (list: VectorHit[]) => JSON.stringify(list.map((hit) => [hit.id, hit.similarity]));
    const wrong = (why: string) =>
      fail(`${asked}\n${why}\ngot      ${shown(hits)}\nexpected ${shown(expected)}`);
    const allowed = new Map(ranked.map((hit) => [hit.id, hit]));
    // Always exact, whatever path answered: only documents the query may see, scored exactly, in order.
    for (const [i, hit] of hits.entries()) {
      const truth = allowed.get(hit.id);
      if (!truth) wrong(`${hit.id}: deleted, of another feed, filtered out or excluded`);
      if (hit.productId !== truth!.productId || hit.itemGroupId !== truth!.itemGroupId)
        wrong(`${hit.id}: filed as ${hit.productId}/${hit.itemGroupId}`);
      if (Math.abs(hit.similarity - truth!.similarity) >= SCORE_EPSILON) wrong(`${hit.id}: score`);
      if (i > 0 && byRank(hits[i - 1]!, hit) >= 0) wrong(`order or duplicate at ${i}`);
    }
    // Answers that may come from the HNSW graph are approximate (the port says so): an unfiltered query
    // always walks it, and a filtered one may when the exact threshold is below the feed. Those count
    // towards a recall floor; every other answer (a scan of the matching rows) must be the exact top k,
    // ties included: the port breaks them by productId, for stable paging.
    const plain =
      Object.values(q.filter ?? {}).every((values) => values.length === 0) && !q.excludeItemGroupIds?.length;
    if (plain || config.exactThreshold < 4096) {
      if (hits.length > expected.length) wrong('too many');
      const floor = expected.at(-1)?.similarity ?? 1;
      recall.found += hits.filter((hit) => hit.similarity >= floor - SCORE_EPSILON).length;
      recall.wanted += expected.length;
      return;
    }
    if (hits.map((hit) => hit.id).join() !== expected.map((hit) => hit.id).join()) wrong('not the top k');
  };

  /** Every id ever written: getVectors must answer the deleted ones with nothing, also after a reopen. */
  const written = new Set<string>();

  const checkState = async (): Promise<void> => {
    for (const feedId of FEEDS) {
      const count = await index.count(feedId);
      if (count !== reference.count(feedId))
        fail(`count ${feedId}: ${count}, not ${reference.count(feedId)}`);
    }
    const asked = [...written, 'nothing'];
    const vectors = await index.getVectors(asked);
    for (const id of asked) {
      const truth = reference.docs.get(id);
      const got = vectors.get(id);
      if (!truth && got) fail(`getVectors ${id}: deleted, yet answered`);
      if (truth && (!got || got.join() !== truth.vector.join())) fail(`getVectors ${id}: ${got?.join()}`);
    }
  };

  try {
    for (let step = 0; step < steps; step += 1) {
      const roll = random();
      if (roll < 0.3) {
        const feedId = pick(FEEDS);
        const batch = Array.from({ length: 1 + Math.floor(random() * (chance(0.2) ? 60 : 6)) }, () =>
          document(chance(0.9) ? feedId : pick(FEEDS)),
        );
        log.push(`upsert ${batch.map((d) => `${d.id}[${d.itemGroupId}]`).join(' ')}`);
        await index.upsert(batch);
        reference.upsert(batch);
        for (const { id } of batch) written.add(id);
      } else if (roll < 0.4) {
        const feedId = pick(FEEDS);
        const productIds = Array.from({ length: 1 + Math.floor(random() * 3) }, product);
        const except = chance(0.5)
          ? Array.from(
              { length: 1 + Math.floor(random() * 3) },
              () => `${feedId}/${pick(productIds)}/${Math.floor(random() * 3)}`,
            )
          : [];
        log.push(`deleteProducts ${feedId} ${productIds.join(',')} except ${except.join(',')}`);
        await index.deleteProducts(feedId, productIds, except);
        reference.deleteProducts(feedId, productIds, except);
      } else if (roll < 0.43) {
        const feedId = pick(FEEDS);
        log.push(`deleteFeed ${feedId}`);
        await index.deleteFeed(feedId);
        reference.deleteFeed(feedId);
        durable.deleteFeed(feedId);
      } else if (roll < 0.5) {
        log.push('flush');
        await index.flush();
        durable = reference.clone();
      } else if (roll < 0.55) {
        // Reopened now and then with the other quantization: a saved feed keeps its own.
        const quantization = chance(0.8) ? config.quantization : 'f32';
        const flushed = chance(0.7);
        log.push(`${flushed ? 'flush, ' : ''}reopen`);
        if (flushed) {
          await index.flush();
          durable = reference.clone();
        }
        index = open(quantization);
        reference = durable.clone();
      } else if (roll < 0.6) {
        const queries = Array.from({ length: 1 + Math.floor(random() * 4) }, query);
        // Several plain queries of one feed and k go to the graph as a batch.
        if (chance(0.5)) queries.push(...queries.map((q) => ({ ...q, filter: undefined, vector: vector() })));
        const answers = await index.searchMany(queries);
        for (const [i, q] of queries.entries()) check(q, answers[i]!, `searchMany[${i}]`);
        for (const [i, q] of queries.entries())
          if (JSON.stringify(await index.search(q)) !== JSON.stringify(answers[i]))
            fail(`searchMany[${i}] differs from search: ${describeQuery(q)}`);
      } else {
        const q = query();
        check(q, await index.search(q), 'search');
      }
      if (step % 5 === 4) await checkState();
    }
    await checkState();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('UsearchVectorIndex against a reference model', () => {
  it('agrees with the contract over random operation sequences', { timeout: 120_000 }, async () => {
    const first = Number(process.env.MODEL_SEED ?? 1);
    const runs = Number(process.env.MODEL_RUNS ?? (process.env.MODEL_SEED ? 1 : 80));
    const seeds = Array.from({ length: runs }, (_, i) => first + i);
    for (const seed of seeds) await scenario(seed, Number(process.env.MODEL_STEPS ?? 60));
    console.log(`graph-path recall ${recall.found}/${recall.wanted}`);
    expect(recall.found / Math.max(1, recall.wanted)).toBeGreaterThan(0.95);
  });
});
