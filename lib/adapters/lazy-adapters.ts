/**
 * Ports whose adapter is built on first use, so that the module behind it (and the client library it
 * imports) is only loaded by processes that call it. The OpenSearch and API Gateway clients took ~280 and
 * ~72 ms to import (docs/benchmarks.md "Cold start"); local mode never uses either, and in AWS only
 * some functions do. A failed load is retried by the next call.
 */
import type {
  ApiKeyRegistry,
  VisualWordDocument,
  VisualWordHit,
  VisualWordIndex,
  VisualWordQuery,
} from '#lib/ports.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import { memoised } from '#lib/memoised.ts';

export class LazyVisualWordIndex implements VisualWordIndex {
  private readonly index: () => Promise<VisualWordIndex>;

  constructor(load: () => Promise<VisualWordIndex>) {
    this.index = memoised(load);
  }

  async upsert(documents: VisualWordDocument[]): Promise<void> {
    return (await this.index()).upsert(documents);
  }

  async deleteProducts(feedId: string, productIds: string[], except?: readonly string[]): Promise<void> {
    return (await this.index()).deleteProducts(feedId, productIds, except);
  }

  async deleteFeed(feedId: string, options?: { signal?: AbortSignal }): Promise<void> {
    return (await this.index()).deleteFeed(feedId, options);
  }

  async search(query: VisualWordQuery): Promise<VisualWordHit[]> {
    return (await this.index()).search(query);
  }

  async flush(): Promise<void> {
    return (await this.index()).flush();
  }
}

export class LazyApiKeyRegistry implements ApiKeyRegistry {
  private readonly registry: () => Promise<ApiKeyRegistry>;

  constructor(load: () => Promise<ApiKeyRegistry>) {
    this.registry = memoised(load);
  }

  async register(key: SearchKey, plan: Feed['plan']): Promise<void> {
    return (await this.registry()).register(key, plan);
  }

  async unregister(searchId: string): Promise<void> {
    return (await this.registry()).unregister(searchId);
  }
}
