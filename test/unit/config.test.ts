import { describe, expect, it } from 'vitest';
import { CONFIG_ENV_KEYS, ConfigError, loadConfig, parseConfigValue } from '#lib/config.ts';

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

  it('mirrors search ids into a usage plan per feed plan with the plan ids alone (no REST API id)', () => {
    // Prepare
    const env = {
      API_KEY_REGISTRY: 'apigateway',
      USAGE_PLAN_FREE_ID: 'plan-free',
      USAGE_PLAN_PRO_ID: 'plan-pro',
      USAGE_PLAN_ENTERPRISE_ID: 'plan-enterprise',
    };

    // Act
    const config = loadConfig(env);

    // Assess
    expect(config.apiKeyRegistry).toEqual({
      kind: 'apigateway',
      usagePlanIds: { free: 'plan-free', pro: 'plan-pro', enterprise: 'plan-enterprise' },
    });
    expect(CONFIG_ENV_KEYS).not.toContain('REST_API_ID');
  });

  it('requires the Enterprise usage plan id along with the others when the registry is on', () => {
    const env = { API_KEY_REGISTRY: 'apigateway', USAGE_PLAN_FREE_ID: 'f', USAGE_PLAN_PRO_ID: 'p' };
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(/USAGE_PLAN_ENTERPRISE_ID/);
  });
});

describe('parseConfigValue', () => {
  it("parses one key's value with loadConfig's own field parser", () => {
    expect(parseConfigValue('MIN_SCORE', '0.5')).toBe(0.5);
    expect(parseConfigValue('EMBEDDING_PROJECTION', 'false')).toBe(false);
    expect(parseConfigValue('REGIONAL_TOP_N', '10')).toBe(
      loadConfig({ REGIONAL_TOP_N: '10' }).search.regionalTopN,
    );
  });

  it('refuses what loadConfig refuses, naming the key and the value', () => {
    expect(() => parseConfigValue('MIN_SCORE', '1.5')).toThrow(ConfigError);
    expect(() => parseConfigValue('MIN_SCORE', '1.5')).toThrow(/MIN_SCORE="1\.5"/);
    expect(() => parseConfigValue('RERANK_TOP_N', 'ten')).toThrow(/RERANK_TOP_N/);
    expect(() => parseConfigValue('EMBEDDING_PROJECTION', 'yes')).toThrow(/EMBEDDING_PROJECTION/);
  });
});
