import type { Client } from '@opensearch-project/opensearch';
import { describe } from 'vitest';
import { createOpenSearchClient, OpenSearchVectorIndex } from '#lib/adapters/opensearch-vector-index.ts';
import { OpenSearchVisualWordIndex } from '#lib/adapters/opensearch-visual-word-index.ts';
import { CONTRACT_DIMENSION, describeVectorIndexContract } from './vector-index.contract.ts';
import { describeVisualWordIndexContract } from './visual-word-index.contract.ts';

/**
 * The contract against a real cluster, opt-in: `OPENSEARCH_URL=http://localhost:9200 npx vitest run
 * test/integration/opensearch-real.test.ts` (add `OPENSEARCH_SIGV4=true AWS_REGION=…` for Amazon OpenSearch
 * Service). Every test writes to its own throw-away index, deleted afterwards.
 *
 * The visual-word contract sends queries of 8,000 words, one boolean clause each: the cluster needs
 * `indices.query.bool.max_clause_count` ≥ 8,194, as the CDK stack sets on the domain (e.g. `docker run -e
 * discovery.type=single-node -e indices.query.bool.max_clause_count=10240 … opensearchproject/opensearch:2.19.0`,
 * or, from 2.16, `PUT _cluster/settings {"persistent":{"indices.query.bool.max_clause_count":10240}}`);
 * at the default 1,024 its catalogue-sized test fails with too_many_clauses.
 */
const url = process.env.OPENSEARCH_URL;

describe.runIf(url !== undefined && url !== '')('OpenSearch indices on a real cluster', () => {
  // Created on first use: a skipped suite's body still runs while vitest collects tests.
  let client: Client | undefined;
  const getClient = (): Client =>
    (client ??= createOpenSearchClient({
      url: url ?? '',
      sigv4: process.env.OPENSEARCH_SIGV4 === 'true',
      region: process.env.AWS_REGION ?? 'us-east-1',
    }));
  const stamp = `${Date.now().toString(36)}-${process.pid}`;
  let run = 0;

  for (const [engine, spaceType] of [
    ['faiss', 'innerproduct'],
    ['lucene', 'cosinesimil'],
  ] as const) {
    describeVectorIndexContract(`${engine} ${spaceType}`, async () => {
      run += 1;
      const index = new OpenSearchVectorIndex({
        client: getClient(),
        indexPrefix: 'vps-contract',
        modelVersion: `${engine}-${stamp}-${run}`,
        dimension: CONTRACT_DIMENSION,
        engine,
        spaceType,
        shards: 1,
        replicas: 0,
      });
      return {
        index,
        close: async () => {
          await getClient().indices.delete({ index: index.indexName, ignore_unavailable: true });
        },
      };
    });
  }

  describeVisualWordIndexContract('visual words', async () => {
    run += 1;
    // One shard: the contract's idf expectations assume one shard's statistics, as routing gives a feed.
    const index = new OpenSearchVisualWordIndex({
      client: getClient(),
      indexPrefix: `vps-contract-${stamp}-${run}`,
      shards: 1,
      replicas: 0,
    });
    return {
      index,
      close: async () => {
        await getClient().indices.delete({ index: index.indexName, ignore_unavailable: true });
      },
    };
  });
});
