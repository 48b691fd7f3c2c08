import type { Client } from '@opensearch-project/opensearch';
import { describe } from 'vitest';
import { createOpenSearchClient, OpenSearchVectorIndex } from '#lib/adapters/opensearch-vector-index.ts';
import { CONTRACT_DIMENSION, describeVectorIndexContract } from './vector-index.contract.ts';

/**
 * The contract against a real cluster, opt-in: `OPENSEARCH_URL=http://localhost:9200 npx vitest run
 * test/integration/opensearch-real.test.ts` (add `OPENSEARCH_SIGV4=true AWS_REGION=…` for Amazon OpenSearch
 * Service). Every test writes to its own throw-away index, deleted afterwards.
 */
const url = process.env.OPENSEARCH_URL;

describe.runIf(url !== undefined && url !== '')('OpenSearch vector index on a real cluster', () => {
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
});
