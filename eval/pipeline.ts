/**
 * Full search pipeline on the project benchmark: the catalogue goes in through the real import (local
 * stack: embedded DynamoDB and S3, local vector index, features stored at import), and every query goes
 * through the image-search use case (`searchByImage`) once per pipeline variant, so each stage of the
 * pipeline gets its own row (the ablation table of docs/quality.md).
 *
 * Per variant: R@1, R@10 and mAP@10 (one relevant item per query, so AP = 1/rank within the first 10),
 * overall, per kind, and on the held-aside split that no setting was chosen on: odd query ids that are
 * not in the 100-query stratified subset (`TUNING_SUBSET`) the pipeline's settings (visual-word
 * definition, shortlist sizes) were compared on; the
 * median and p90 wall time of the use case per query (embedding, query features, k-NN, verification,
 * hydration; no HTTP); and, for the configured minimum score, how many correct top-1 results survive it
 * and how many unrelated photos (wallpaper crops with no catalogue object) still return something.
 */
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, normalize } from 'node:path';
import sharp from 'sharp';
import { createFeed } from '#lib/domain/admin/feeds.ts';
import { searchByImage, type SearchDeps } from '#lib/domain/search.ts';
import { loadConfig } from '#lib/config.ts';
import type { Container } from '#lib/container.ts';
import type { Detector } from '#lib/ports.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import { startLocalStack } from '#lib/local/stack.ts';
import { EVAL_ROOT } from './fetch-data.ts';
import {
  seededRandom,
  stratifiedSubset,
  type Query,
  type RetrievalBenchmark,
} from './retrieval-benchmark.ts';

const FEED_ID = 'benchmark';
/**
 * Size of the stratified subset (`stratifiedSubset(queries, 100, seed)`, i.e. `npm run eval -- --queries
 * 100`) on which the pipeline's settings were chosen; its queries are never counted as held-aside.
 */
export const TUNING_SUBSET = 100;
const RESULTS_DIR = join(import.meta.dirname, '../.cache/eval-results');
const LIMIT = 10;

/** A named search configuration: what the use case is given on top of the configured container. */
export interface PipelineVariant {
  name: string;
  deps(container: Container): SearchDeps;
}

/** Re-ranking with the given shortlist sizes (global top N, keypoint shortlist top N). */
function reranked(c: Container, topN: number, wordTopN: number): SearchDeps['reranking'] {
  return c.reranking && { ...c.reranking, topN, wordTopN };
}

/** The service's defaults (lib/config.ts, no environment): what the "default" rows measure. */
const DEFAULTS = loadConfig({}).search;

/** The default pipeline's stages, with the given shortlist sizes (global, keypoint, regional top N). */
function defaultStages(
  c: Container,
  topN = DEFAULTS.rerankTopN,
  wordTopN = DEFAULTS.wordShortlistTopN,
  regionalTopN = DEFAULTS.regionalTopN,
): SearchDeps {
  return {
    ...c,
    detectorCrop: DEFAULTS.detectorCrop,
    regional: { topN: regionalTopN },
    reranking: reranked(c, topN, wordTopN),
  };
}

/**
 * The default pipeline with the second look (SECOND_LOOK_BOXES) at `boxes` detector boxes, each box's
 * keypoint shortlist `wordTopN` deep (SECOND_LOOK_WORD_TOP_N, 50 by default). `detector` replaces the
 * configured detector (NanoDet) for the second look, to compare others (eval/objectron.ts).
 */
export function withSecondLook(
  boxes: number,
  wordTopN = DEFAULTS.secondLook.wordTopN,
  detector?: { name: string; of(container: Container): Promise<Detector> },
): PipelineVariant {
  const whose = detector ? `${detector.name} ` : 'detector ';
  return {
    name: `projected: default + second look at ${boxes} ${whose}box${boxes > 1 ? 'es' : ''}, box shortlists ${wordTopN} deep, when nothing verified`,
    deps: (c) => ({
      ...defaultStages(c),
      secondLook: { ...DEFAULTS.secondLook, boxes, wordTopN },
      ...(detector
        ? { vision: async () => ({ ...(await c.vision()), detector: await detector.of(c) }) }
        : {}),
    }),
  };
}

/** The default pipeline with other shortlist sizes (global, keypoint, regional top N). */
function withShortlists(topN: number, wordTopN: number, regionalTopN: number): PipelineVariant {
  return {
    name: `projected: default with shortlists global ${topN} + keypoint ${wordTopN} + regional ${regionalTopN}`,
    deps: (c) => defaultStages(c, topN, wordTopN, regionalTopN),
  };
}

/**
 * The stages, each row adding one to the previous or swapping one (see docs/quality.md). `projected`:
 * the catalogue was embedded with the learned projection; only the rows it can change are run again.
 */
export function defaultVariants(projected = false): PipelineVariant[] {
  if (projected)
    return [
      {
        name: 'projected: global only',
        deps: (c) => ({ ...c, regional: undefined, reranking: undefined, detectorCrop: false }),
      },
      {
        name: 'projected: + ORB verification of the global top 10',
        deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 10, 0) }),
      },
      {
        name: 'projected: global top 10 + keypoint shortlist top 10, verified',
        deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 10, 10) }),
      },
      {
        name: 'projected: global 10 + keypoint 10 + regional evidence (no regional shortlist)',
        deps: (c) => ({ ...c, detectorCrop: false, regional: { topN: 0 }, reranking: reranked(c, 10, 10) }),
      },
      {
        name: 'projected: global 10 + keypoint 10 + regional shortlist 30 and evidence (default)',
        deps: (c) => defaultStages(c),
      },
      withSecondLook(1),
      withSecondLook(2),
      withSecondLook(3),
      withSecondLook(1, 10),
      withSecondLook(1, 30),
      withSecondLook(3, 100),
      withShortlists(10, 10, 20),
      withShortlists(10, 20, 20),
      withShortlists(10, 10, 10),
      withShortlists(10, 10, 25),
      withShortlists(5, 10, 20),
      withShortlists(5, 10, 30),
      withShortlists(20, 20, 20),
      {
        name: 'projected: global top 10 + keypoint shortlist top 20, verified',
        deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 10, 20) }),
      },
      {
        name: 'projected: global top 20 + keypoint shortlist top 50, verified',
        deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 20, 50) }),
      },
    ];
  return [
    {
      name: 'global only',
      deps: (c) => ({ ...c, regional: undefined, reranking: undefined, detectorCrop: false }),
    },
    {
      name: 'global, max(whole, detector box)',
      deps: (c) => ({ ...c, regional: undefined, reranking: undefined, detectorCrop: true }),
    },
    {
      name: '+ ORB verification of the global top 20',
      deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 20, 0) }),
    },
    {
      name: '+ ORB verification of the global top 50',
      deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 50, 0) }),
    },
    {
      name: 'global top 20 + keypoint shortlist top 20, verified',
      deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 20, 20) }),
    },
    {
      name: 'global top 10 + keypoint shortlist top 20, verified',
      deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 10, 20) }),
    },
    {
      name: 'global top 20 + keypoint shortlist top 50, verified',
      deps: (c) => ({ ...c, regional: undefined, detectorCrop: false, reranking: reranked(c, 20, 50) }),
    },
    {
      name: 'detector box + global top 20 + keypoint top 20, verified',
      deps: (c) => ({ ...c, regional: undefined, detectorCrop: true, reranking: reranked(c, 20, 20) }),
    },
  ];
}

interface Outcome {
  query: Query;
  rank: number;
  topScore: number;
  ms: number;
}

const fmt = (value: number): string => value.toFixed(3);
const percentile = (values: readonly number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? Number.NaN;
};

/** Serves the benchmark folder read-only on 127.0.0.1 so the import fetches images like a shop's. */
async function serveDirectory(directory: string): Promise<{ server: Server; url: string }> {
  const server = createServer((request, response) => {
    const path = normalize(decodeURIComponent(new URL(request.url ?? '/', 'http://x').pathname));
    if (path.includes('..')) return void response.writeHead(400).end();
    readFile(join(directory, path)).then(
      (body) => response.writeHead(200, { 'Content-Type': 'image/png' }).end(body),
      () => response.writeHead(404).end(),
    );
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/**
 * Unrelated queries: per background wallpaper of the benchmark, a 640×480 crop at a seeded zoom and
 * position (JPEG q80). They share the scene queries' backgrounds but contain no catalogue object.
 */
export async function unrelatedQueriesFor(benchmark: RetrievalBenchmark, seed: number): Promise<Buffer[]> {
  const index = JSON.parse(readFileSync(join(benchmark.directory, 'benchmark.json'), 'utf8')) as {
    backgrounds: string[];
  };
  return unrelatedQueries(index.backgrounds, seed);
}

async function unrelatedQueries(backgrounds: readonly string[], seed: number): Promise<Buffer[]> {
  const random = seededRandom(seed ^ 0xbadd);
  const out: Buffer[] = [];
  for (const background of backgrounds) {
    const zoom = 1 + random() * 0.8;
    const [width, height] = [Math.round(640 * zoom), Math.round(480 * zoom)];
    const resized = await sharp(join(EVAL_ROOT, background))
      .resize(width, height, { fit: 'cover' })
      .toBuffer();
    out.push(
      await sharp(resized)
        .extract({
          left: Math.floor(random() * (width - 640 + 1)),
          top: Math.floor(random() * (height - 480 + 1)),
          width: 640,
          height: 480,
        })
        .jpeg({ quality: 80 })
        .toBuffer(),
    );
  }
  return out;
}

export interface PipelineEvalOptions {
  benchmark: RetrievalBenchmark;
  queries: readonly Query[];
  seed: number;
  variants?: PipelineVariant[];
  /** Configuration of the local stack (process.env by default), e.g. RERANK_TOP_N or MIN_SCORE. */
  env?: Record<string, string | undefined>;
  /** Embed the catalogue and queries with the learned projection (EMBEDDING_PROJECTION). */
  projection: boolean;
}

/** Imports the benchmark catalogue into a temporary local stack and prints one row per variant. */
export async function evaluatePipelines(options: PipelineEvalOptions): Promise<void> {
  const { benchmark, queries } = options;
  const dataDir = await mkdtemp(join(tmpdir(), 'vps-eval-pipeline-'));
  const files = await serveDirectory(benchmark.directory);
  const stack = await startLocalStack({
    ...(options.env ?? process.env),
    EMBEDDING_PROJECTION: String(options.projection),
    LOG_LEVEL: 'silent',
    PORT: '0',
    DATA_DIR: dataDir,
    DEMO_SEED: 'false',
  });
  try {
    const c = stack.container;
    await stack.importsIdle();
    await createFeed(
      { ...c, planLimits: c.config.planLimits },
      { feedId: FEED_ID, name: 'Project benchmark', plan: 'pro', domains: [], requireOrigin: false },
    );
    const feed = benchmark.items
      .map((item) =>
        JSON.stringify({ id: `item-${item.id}`, title: item.stamp, image_link: `${files.url}/${item.file}` }),
      )
      .join('\n');
    const importStarted = performance.now();
    const record = await startImport(c, FEED_ID, { content: feed, format: 'jsonl', mode: 'full' });
    await stack.importsIdle();
    const imported = await c.imports.get(FEED_ID, record.importId);
    const importSeconds = (performance.now() - importStarted) / 1000;
    console.log(
      `pipeline: imported ${imported?.embedded ?? 0}/${benchmark.items.length} items (status ${imported?.status}, ${imported?.failed ?? 0} failed) in ${importSeconds.toFixed(1)} s` +
        ` = ${((imported?.embedded ?? 0) / importSeconds).toFixed(1)} items/s, ${(await c.objects.list(`features/${FEED_ID}/`)).length} feature records`,
    );
    if (imported?.status !== 'succeeded') throw new Error(`benchmark import ${imported?.status}`);

    const images = queries.map((query) => readFileSync(join(benchmark.directory, query.file)));
    const unrelated = await unrelatedQueries(
      (
        JSON.parse(readFileSync(join(benchmark.directory, 'benchmark.json'), 'utf8')) as {
          backgrounds: string[];
        }
      ).backgrounds,
      options.seed,
    );
    const minScore = c.config.search.minScore;
    console.log(
      `pipeline: ${queries.length} queries, ${unrelated.length} unrelated photos, limit ${LIMIT}, MIN_SCORE ${minScore} (recall is measured with no cut-off)`,
    );
    console.log(
      '| pipeline | R@1 | R@10 | mAP@10 | R@1 scene | R@10 scene | R@1 flat | R@10 flat | held-aside R@1 | held-aside R@10 | held-aside scene R@1 | held-aside scene R@10 | ms p50 | ms p90 | top-1 ≥ MIN_SCORE | unrelated answered |',
    );
    console.log(`|${'---|'.repeat(16)}`);
    const tuning = new Set(stratifiedSubset(benchmark.queries, TUNING_SUBSET, options.seed).map((q) => q.id));
    const heldAside = (q: Query) => q.id % 2 === 1 && !tuning.has(q.id);
    const perQuery: Record<string, { query: number; rank: number | null; topScore: number; ms: number }[]> =
      {};
    for (const variant of options.variants ?? defaultVariants(options.projection)) {
      const deps = variant.deps(c);
      const search = (image: Buffer, cutOff: number) =>
        searchByImage({ ...deps, minScore: cutOff }, { feedId: FEED_ID, image, limit: LIMIT, offset: 0 });
      // Warm-up: models, OpenCV and the feature cache, outside the timings.
      for (const image of images.slice(0, 3)) await search(image, 0);
      const outcomes: Outcome[] = [];
      for (const [i, query] of queries.entries()) {
        const started = performance.now();
        const hits = await search(images[i]!, 0);
        const ms = performance.now() - started;
        const rank = hits.findIndex((hit) => hit.product.product_id === `item-${query.item}`);
        outcomes.push({
          query,
          rank: rank < 0 ? Number.POSITIVE_INFINITY : rank,
          topScore: hits[0]?.score ?? 0,
          ms,
        });
      }
      let answered = 0;
      for (const image of unrelated) if ((await search(image, minScore)).length > 0) answered += 1;
      const of = (keep: (q: Query) => boolean) => outcomes.filter((o) => keep(o.query));
      const recall = (set: Outcome[], k: number) => fmt(set.filter((o) => o.rank < k).length / set.length);
      const meanAp = (set: Outcome[]) =>
        fmt(set.reduce((sum, o) => sum + (o.rank < LIMIT ? 1 / (o.rank + 1) : 0), 0) / set.length);
      const scene = of((q) => q.kind === 'scene');
      const flat = of((q) => q.kind === 'flat');
      const held = of(heldAside);
      const heldScene = held.filter((o) => o.query.kind === 'scene');
      const top1 = outcomes.filter((o) => o.rank === 0);
      const kept = top1.filter((o) => o.topScore >= minScore).length;
      const times = outcomes.map((o) => o.ms);
      perQuery[variant.name] = outcomes.map((o) => ({
        query: o.query.id,
        rank: Number.isFinite(o.rank) ? o.rank : null,
        topScore: o.topScore,
        ms: Math.round(o.ms * 10) / 10,
      }));
      console.log(
        `| ${variant.name} | ${recall(outcomes, 1)} | ${recall(outcomes, 10)} | ${meanAp(outcomes)} | ${recall(scene, 1)} | ${recall(scene, 10)} | ${recall(flat, 1)} | ${recall(flat, 10)} | ${recall(held, 1)} | ${recall(held, 10)} | ${recall(heldScene, 1)} | ${recall(heldScene, 10)} | ${percentile(times, 0.5).toFixed(1)} | ${percentile(times, 0.9).toFixed(1)} | ${kept}/${top1.length} | ${answered}/${unrelated.length} |`,
      );
    }
    await mkdir(RESULTS_DIR, { recursive: true });
    const resultsFile = join(
      RESULTS_DIR,
      `pipeline-seed${options.seed}-${queries.length}q${options.projection ? '-projected' : ''}.json`,
    );
    await writeFile(
      resultsFile,
      JSON.stringify({ seed: options.seed, heldAside: queries.filter(heldAside).map((q) => q.id), perQuery }),
    );
    console.log(
      `pipeline: held-aside = ${queries.filter(heldAside).length} queries (odd ids outside the ${TUNING_SUBSET}-query tuning subset); per-query results in ${resultsFile}`,
    );
  } finally {
    await stack.close();
    files.server.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}
