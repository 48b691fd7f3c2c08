import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '#lib/config.ts';

describe('loadConfig', () => {
  it('has working local defaults', () => {
    const config = loadConfig({});
    expect(config.planLimits).toEqual({ free: 100, pro: 1000, enterprise: 10000 });
    expect(config.vectorIndex).toEqual({
      kind: 'local',
      dir: '.data/vectors',
      wordMemoryBytes: 256 * 2 ** 20,
    });
    expect(config.maxBodyBytes).toBe(6 * 1024 * 1024);
    expect(config.apiKeyRegistry).toEqual({ kind: 'none' });
  });

  it('reads numbers and flags from strings', () => {
    const config = loadConfig({ PLAN_LIMIT_FREE: '7', FETCH_ALLOW_PRIVATE: 'true', PORT: '0' });
    expect(config.planLimits.free).toBe(7);
    expect(config.fetchAllowPrivate).toBe(true);
    expect(config.local.port).toBe(0);
  });

  it('fails with every problem named', () => {
    expect(() => loadConfig({ PLAN_LIMIT_FREE: '-1', DYNAMODB_ENDPOINT: 'not a url' })).toThrow(ConfigError);
    expect(() => loadConfig({ PLAN_LIMIT_FREE: '-1', DYNAMODB_ENDPOINT: 'not a url' })).toThrow(
      /PLAN_LIMIT_FREE.*DYNAMODB_ENDPOINT|DYNAMODB_ENDPOINT.*PLAN_LIMIT_FREE/,
    );
  });

  it('requires the OpenSearch URL when OpenSearch is chosen', () => {
    expect(() => loadConfig({ VECTOR_INDEX: 'opensearch' })).toThrow(/OPENSEARCH_URL/);
    expect(
      loadConfig({ VECTOR_INDEX: 'opensearch', OPENSEARCH_URL: 'https://search.example.com' }).vectorIndex,
    ).toEqual({
      kind: 'opensearch',
      url: 'https://search.example.com',
      indexPrefix: 'products',
      sigv4: false,
    });
  });
});
