/**
 * Index plumbing shared by the OpenSearch adapters (vector index, visual-word index): status of a client
 * error, creating an index once, and feed-routed delete-by-query.
 */
import type { Client } from '@opensearch-project/opensearch';

/** HTTP status of an OpenSearch client error, when it has one. */
export function statusOf(error: unknown): number | undefined {
  return (error as { meta?: { statusCode?: number } } | undefined)?.meta?.statusCode;
}

/** Creates the index unless it exists; a concurrent creator winning the race is not an error. */
export async function createIndexIfMissing(
  client: Client,
  index: string,
  body: Record<string, unknown>,
): Promise<void> {
  const exists = await client.indices.exists({ index });
  if (exists.body) return;
  try {
    await client.indices.create({ index, body });
  } catch (error) {
    const type = (error as { meta?: { body?: { error?: { type?: string } } } }).meta?.body?.error?.type;
    if (type !== 'resource_already_exists_exception') throw error;
  }
}

/**
 * Deletes a feed's documents matching `filter` (routed by the feed id). Deletes must be visible to the next
 * search, like upserts; a conflict with a concurrent re-index of the same document is resolved in favour of
 * the newer write. A missing index has nothing to delete.
 */
export async function deleteFeedDocuments(
  client: Client,
  index: string,
  feedId: string,
  filter: Array<Record<string, unknown>>,
  /** Document ids the query leaves alone. */
  except: readonly string[] = [],
): Promise<void> {
  const mustNot = except.length > 0 ? { must_not: [{ ids: { values: [...except] } }] } : {};
  try {
    await client.deleteByQuery({
      index,
      routing: feedId,
      refresh: true,
      conflicts: 'proceed',
      body: { query: { bool: { filter, ...mustNot } } },
    });
  } catch (error) {
    if (statusOf(error) === 404) return;
    throw error;
  }
}
