import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '#lib/config.ts';
import { ROUTES } from '#lib/http/routes.ts';
import { keysOfScope } from '../../infra/function-environment.ts';
import { addService } from '../../infra/service.ts';
import { STAGE_CONFIG, STAGES } from '../../infra/stages.ts';
import { resolveTuning, type Tuning } from '../../infra/tuning.ts';
import { placeholder } from './synth.ts';

describe('resolveTuning', () => {
  it("takes a stage's tuning of default-scope settings as the functions' environment", () => {
    expect(resolveTuning({ REGIONAL_TOP_N: '10', MIN_SCORE: '0.5' }, undefined)).toEqual({
      REGIONAL_TOP_N: '10',
      MIN_SCORE: '0.5',
    });
  });

  it('lays --context tuning (JSON, as the CLI passes it) over the stage, key by key', () => {
    expect(
      resolveTuning({ REGIONAL_TOP_N: '10', MIN_SCORE: '0.5' }, '{"MIN_SCORE":"0.3","RERANK_TOP_N":20}'),
    ).toEqual({ REGIONAL_TOP_N: '10', MIN_SCORE: '0.3', RERANK_TOP_N: '20' });
    // An object (cdk.json or an App's context) too.
    expect(resolveTuning(undefined, { EMBEDDING_PROJECTION: false })).toEqual({
      EMBEDDING_PROJECTION: 'false',
    });
  });

  it("refuses a value the config's own parser refuses, naming the key, the value and where it came from", () => {
    expect(() => resolveTuning({ MIN_SCORE: '1.5' }, undefined)).toThrow(
      /stage tuning \(infra\/stages\.ts\): MIN_SCORE="1\.5": .*1/,
    );
    expect(() => resolveTuning(undefined, '{"REGIONAL_TOP_N":"ten"}')).toThrow(
      /--context tuning: REGIONAL_TOP_N="ten"/,
    );
    expect(() => resolveTuning({ EMBEDDING_PROJECTION: 'yes' }, undefined)).toThrow(/EMBEDDING_PROJECTION/);
  });

  it('refuses unknown keys, keys the stack sets, local-only keys and empty values, all in one message', () => {
    // Prepare: a typo, a key of the stack, a local-mode key, an empty value.
    const tuning = {
      MIN_SCOR: '0.5',
      OPENSEARCH_URL: 'https://x',
      LOCAL_FEATURE_WORKERS: '1',
      RERANK_TOP_N: '',
    };

    // Act
    let message = '';
    try {
      resolveTuning(tuning as unknown as Tuning, undefined);
    } catch (error) {
      message = (error as Error).message;
    }

    // Assess
    expect(message).toMatch(/MIN_SCOR is not a configuration key/);
    expect(message).toMatch(/OPENSEARCH_URL is not tunable \(scope `every`/);
    expect(message).toMatch(/LOCAL_FEATURE_WORKERS is not tunable \(scope `local`/);
    expect(message).toMatch(/RERANK_TOP_N is empty/);
    expect(message).toMatch(/Tunable keys: .*MIN_SCORE.*REGIONAL_TOP_N/);
  });

  it('refuses context that is not a JSON object', () => {
    expect(() => resolveTuning(undefined, 'MIN_SCORE=0.5')).toThrow(/--context tuning: not JSON/);
    expect(() => resolveTuning(undefined, '["MIN_SCORE"]')).toThrow(/expected a JSON object/);
  });

  it('accepts, at the type level, default-scope keys only', () => {
    const ok: Tuning = { MIN_SCORE: '0.5', FEATURE_CACHE_MB: '64' };
    // @ts-expect-error: the stack sets OPENSEARCH_URL; it is not a tuning.
    const notTunable: Tuning = { OPENSEARCH_URL: 'https://x' };
    expect([ok, notTunable]).toHaveLength(2);
  });

  it('leaves every shipped stage valid', () => {
    for (const stage of STAGES)
      expect(() => resolveTuning(STAGE_CONFIG[stage].tuning, undefined)).not.toThrow();
  });
});

describe('tuning in the synthesised stack', () => {
  const synth = (tuning: Tuning, context?: string) => {
    const app = new App(context === undefined ? {} : { context: { tuning: context } });
    const { api } = addService(app, 'dev', {
      codeMode: 'inline',
      nativeLayer: 'stub',
      config: { ...STAGE_CONFIG.dev, tuning },
    });
    return Template.fromStack(api);
  };

  it("sets a stage's tuning and --context tuning on every route function and the import worker", () => {
    // Act
    const template = synth({ REGIONAL_TOP_N: '10', MIN_SCORE: '0.5' }, '{"MIN_SCORE":"0.6"}');

    // Assess
    const functions = Object.values(template.findResources('AWS::Lambda::Function')).map(
      (fn) => fn.Properties as { FunctionName: string; Environment: { Variables: Record<string, unknown> } },
    );
    const configured = functions.filter((fn) => fn.FunctionName !== 'vps-dev-Authorizer');
    expect(configured.length).toBeGreaterThanOrEqual(ROUTES.length);
    for (const fn of configured) {
      const env = Object.fromEntries(
        Object.entries(fn.Environment.Variables).map(([key, value]) => [key, placeholder(value)]),
      );
      expect(env, fn.FunctionName).toMatchObject({ REGIONAL_TOP_N: '10', MIN_SCORE: '0.6' });
      // (The worker's queue URL is a reference, no URL before deployment.)
      const { IMPORT_QUEUE_URL: _queue, ...parsed } = env;
      const config = loadConfig({ ...parsed, AWS_REGION: 'eu-west-1' });
      expect([config.search.regionalTopN, config.search.minScore], fn.FunctionName).toEqual([10, 0.6]);
    }
    // The authorizer reads none of them.
    const authorizer = functions.find((fn) => fn.FunctionName === 'vps-dev-Authorizer')!;
    expect(Object.keys(authorizer.Environment.Variables)).not.toContain('MIN_SCORE');
  });

  it('sets no tunable key when the stage tunes nothing (the config defaults apply)', () => {
    const template = synth({});
    for (const fn of Object.values(template.findResources('AWS::Lambda::Function'))) {
      const env = (fn.Properties as { Environment: { Variables: Record<string, unknown> } }).Environment
        .Variables;
      for (const key of keysOfScope('default')) expect(env).not.toHaveProperty(key);
    }
  });

  it('fails the synth with a readable message on a bad value', () => {
    expect(() => synth({ MIN_SCORE: '0,5' })).toThrow(/Invalid tuning:\n- stage tuning .*MIN_SCORE="0,5"/);
    expect(() => synth({}, '{"FEATURE_CACHE_MB":"-1"}')).toThrow(/--context tuning: FEATURE_CACHE_MB="-1"/);
  });
});
