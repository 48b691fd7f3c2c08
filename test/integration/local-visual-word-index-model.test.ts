import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { LocalVisualWordIndex } from '#lib/adapters/local-visual-word-index.ts';
import type { VisualWordDocument, VisualWordHit, VisualWordQuery } from '#lib/ports.ts';
import { wordList } from './visual-word-index.contract.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';

/**
 * A model check of the local visual-word index: random operation sequences applied to the adapter and to
 * a brute-force reference (the local index defines the score: the idf log(1 + live / count) of each
 * shared word, summed), compared after every search. `MODEL_SEED=<seed> MODEL_RUNS=1` replays one.
 * npm test runs seeds 1–60; `MODEL_RUNS=<n>` runs more (200 found no failure, 2026-11-28).
 */

const FEEDS = ['f1', 'f2'];

class Reference {
  docs = new Map<string, VisualWordDocument>();

  clone(): Reference {
    const copy = new Reference();
    copy.docs = new Map(this.docs);
    return copy;
  }

  search(query: VisualWordQuery): VisualWordHit[] {
    const feed = [...this.docs.values()].filter((document) => document.feedId === query.feedId);
    const excluded = new Set(query.excludeItemGroupIds ?? []);
    const weights = new Map<number, number>();
    for (const word of query.words) {
      const count = feed.filter((document) => document.words.includes(word)).length;
      if (count > 0) weights.set(word, (weights.get(word) ?? 0) + Math.log(1 + feed.length / count));
    }
    return feed
      .filter((document) => !excluded.has(document.itemGroupId))
      .map(({ id, productId, itemGroupId, words }) => ({
        id,
        productId,
        itemGroupId,
        score: [...words].reduce((sum, word) => sum + (weights.get(word) ?? 0), 0),
      }))
      .filter((hit) => hit.score > 0)
      .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .slice(0, Math.max(0, query.k));
  }
}

async function scenario(seed: number, steps: number): Promise<void> {
  const random = seededRandom(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const chance = (p: number): boolean => random() < p;
  // In memory, on disk, and on disk with segments written at every flush and merged past two.
  const options = pick([
    {},
    { memoryBytes: 0 },
    { memoryBytes: 0, journal: false, maxSegments: 2, rewriteShare: 1000 },
    { memoryBytes: 0, journal: false, maxSegments: 2, rewriteShare: 0.5 },
  ]);
  const dir = await mkdtemp(join(tmpdir(), 'word-model-'));
  let index = new LocalVisualWordIndex(dir, options);
  let reference = new Reference();
  let durable = new Reference();
  const log: string[] = [`seed ${seed} ${JSON.stringify(options)}`];
  const fail = (what: string): never => {
    throw new Error(`${log.join('\n')}\n${what}`);
  };
  const product = () => `p${Math.floor(random() * 12)}`;
  const words = () =>
    wordList(Array.from({ length: 1 + Math.floor(random() * 12) }, () => Math.floor(random() * 30)));
  try {
    for (let step = 0; step < steps; step += 1) {
      const roll = random();
      if (roll < 0.35) {
        const batch = Array.from({ length: 1 + Math.floor(random() * 4) }, (): VisualWordDocument => {
          const feedId = pick(FEEDS);
          const productId = product();
          return {
            id: `${feedId}/${productId}/${Math.floor(random() * 2)}`,
            feedId,
            productId,
            itemGroupId: `g${Number(productId.slice(1)) % 4}`,
            words: words(),
          };
        });
        log.push(`upsert ${batch.map((d) => `${d.id}:${[...d.words].length}`).join(' ')}`);
        await index.upsert(batch);
        for (const document of batch) reference.docs.set(document.id, document);
      } else if (roll < 0.45) {
        const feedId = pick(FEEDS);
        const productIds = Array.from({ length: 1 + Math.floor(random() * 2) }, product);
        const except = chance(0.5) ? [`${feedId}/${pick(productIds)}/${Math.floor(random() * 2)}`] : [];
        log.push(`deleteProducts ${feedId} ${productIds.join(',')} except ${except.join(',')}`);
        await index.deleteProducts(feedId, productIds, except);
        for (const [id, document] of reference.docs)
          if (document.feedId === feedId && productIds.includes(document.productId) && !except.includes(id))
            reference.docs.delete(id);
      } else if (roll < 0.48) {
        const feedId = pick(FEEDS);
        log.push(`deleteFeed ${feedId}`);
        await index.deleteFeed(feedId);
        for (const model of [reference, durable])
          for (const [id, document] of model.docs) if (document.feedId === feedId) model.docs.delete(id);
      } else if (roll < 0.56) {
        log.push('flush');
        await index.flush();
        durable = reference.clone();
      } else if (roll < 0.62) {
        const closed = chance(0.5);
        log.push(closed ? 'close, reopen' : 'reopen (unflushed changes lost)');
        if (closed) {
          await index.close();
          durable = reference.clone();
        }
        index = new LocalVisualWordIndex(dir, options);
        reference = durable.clone();
      } else {
        const query: VisualWordQuery = {
          feedId: pick(FEEDS),
          words: words(),
          k: Math.floor(random() * 30),
          ...(chance(0.3) ? { excludeItemGroupIds: [`g${Math.floor(random() * 4)}`] } : {}),
        };
        const hits = await index.search(query);
        const expected = reference.search(query);
        const shown = (list: VisualWordHit[]) => JSON.stringify(list.map((hit) => [hit.id, hit.score]));
        const same =
          hits.length === expected.length &&
          hits.every(
            (hit, i) =>
              hit.id === expected[i]!.id &&
              hit.productId === expected[i]!.productId &&
              hit.itemGroupId === expected[i]!.itemGroupId &&
              Math.abs(hit.score - expected[i]!.score) < 1e-9,
          );
        if (!same)
          fail(
            `search ${JSON.stringify({ ...query, words: [...query.words] })}\ngot      ${shown(hits)}\n` +
              `expected ${shown(expected)}`,
          );
      }
    }
  } finally {
    await index.close();
    await rm(dir, { recursive: true, force: true });
  }
}

describe('LocalVisualWordIndex against a reference model', () => {
  it('agrees with the contract over random operation sequences', { timeout: 120_000 }, async () => {
    const first = Number(process.env.MODEL_SEED ?? 1);
    const runs = Number(process.env.MODEL_RUNS ?? (process.env.MODEL_SEED ? 1 : 60));
    for (let seed = first; seed < first + runs; seed += 1)
      await scenario(seed, Number(process.env.MODEL_STEPS ?? 60));
  });
});
