import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { App, RemovalPolicy, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { TABLES } from '#lib/adapters/dynamodb-tables.ts';
import {
  VISUAL_WORD_FILTER_CLAUSES,
  VISUAL_WORD_MAX_QUERY_TERMS,
  visualWordIndexName,
} from '#lib/adapters/opensearch-visual-word-index.ts';
import { CONFIG_ENV_KEYS, loadConfig } from '#lib/config.ts';
import { BUCKET_MS, bucketStart, currentBucketCapacity, retryAfterSeconds } from '#lib/domain/rate-window.ts';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { COMPRESSION_MIN_BYTES } from '#lib/http/compression.ts';
import { ALLOWED_REQUEST_HEADERS, EXPOSED_HEADERS, PREFLIGHT_MAX_AGE_SECONDS } from '#lib/http/cors.ts';
import { ROUTES } from '#lib/http/routes.ts';
import { logImportEnd } from '#lib/ingest/feed-jobs.ts';
import { createLogger } from '#lib/log.ts';
import { PROJECTION_SPEC, WINDOW_PROJECTION_SPEC } from '#lib/vision/projection.ts';
import { AlarmTopic } from '../../infra/constructs/alarms.ts';
import { REPO_ROOT } from '../../infra/constructs/endpoint-function.ts';
import { ENV_SCOPE, keysOfScope, OPENSEARCH_INDEX_PREFIX } from '../../infra/function-environment.ts';
import { ROUTE_ACCESS } from '../../infra/route-access.ts';
import { IMPORT_WORKER_ENTRY } from '../../infra/stacks/api-stack.ts';
import { SEARCH_MAX_CLAUSE_COUNT } from '../../infra/stacks/stateful-stack.ts';
import { STAGE_CONFIG } from '../../infra/stages.ts';
import {
  actionsOf,
  actionsOn,
  functionId,
  placeholder,
  resources,
  type Synthesised,
  statementsOf,
  synthStage,
} from './synth.ts';

const WORKER_EXISTS = existsSync(join(REPO_ROOT, IMPORT_WORKER_ENTRY));
const PUBLIC = ROUTES.filter((route) => route.access === 'public');
const ADMIN = ROUTES.filter((route) => route.access === 'admin');

let dev: Synthesised;
let prod: Synthesised;

beforeAll(() => {
  // Synth runs cdk-nag: an unacknowledged AwsSolutions finding throws here.
  dev = synthStage('dev');
  prod = synthStage('prod');
}, 120_000);

/** Full resource path of an API Gateway method's resource id. */
function pathOf(api: Synthesised['api'], resourceId: unknown): string {
  const all = resources(api);
  const segments: string[] = [];
  let current = resourceId as { Ref?: string };
  while (current.Ref) {
    const resource = all[current.Ref]!;
    segments.unshift(String(resource.Properties!.PathPart));
    current = resource.Properties!.ParentId as { Ref?: string };
  }
  return `/${segments.join('/')}`;
}

function methods(api: Synthesised['api']) {
  return Object.values(resources(api, 'AWS::ApiGateway::Method')).map((method) => {
    const p = method.Properties!;
    return {
      path: pathOf(api, p.ResourceId),
      httpMethod: p.HttpMethod,
      restApi: (p.RestApiId as { Ref: string }).Ref,
      authorizationType: p.AuthorizationType,
      apiKeyRequired: p.ApiKeyRequired,
      authorizer: (p.AuthorizerId as { Ref?: string } | undefined)?.Ref,
      target: JSON.stringify((p.Integration as { Uri?: unknown }).Uri ?? ''),
      integrationType: (p.Integration as { Type: string }).Type,
    };
  });
}

function restApiId(api: Synthesised['api'], name: string): string {
  const found = Object.entries(resources(api, 'AWS::ApiGateway::RestApi')).find(
    ([, r]) => r.Properties?.Name === name,
  );
  return found![0];
}

describe('cdk-nag', () => {
  it('passes AwsSolutions checks in every stage with no unacknowledged findings', () => {
    expect(dev.assemblyDir).toBeTruthy();
    expect(prod.assemblyDir).toBeTruthy();
  });

  it('gives every acknowledgement a written reason', () => {
    for (const synthesised of [dev, prod]) {
      for (const construct of synthesised.app.node.findAll()) {
        for (const entry of construct.node.metadata.filter((m) => m.type === 'aws:cdk:acknowledged-rules')) {
          for (const reason of Object.values(entry.data as Record<string, string>))
            expect(reason.length).toBeGreaterThan(30);
        }
      }
    }
  });

  it("keeps both APIs' execution logs for the stage's retention, the group there before the stage", () => {
    const groups = Object.entries(dev.api.findResources('AWS::Logs::LogGroup')).filter(([, group]) =>
      JSON.stringify(group.Properties?.LogGroupName ?? '').includes('API-Gateway-Execution-Logs_'),
    );
    expect(groups).toHaveLength(2);
    const stages = Object.values(dev.api.findResources('AWS::ApiGateway::Stage'));
    for (const [logicalId, group] of groups) {
      expect(group.Properties?.RetentionInDays).toBe(7);
      expect(stages.some((stage) => ([] as string[]).concat(stage.DependsOn ?? []).includes(logicalId))).toBe(
        true,
      );
    }
  });

  it('warns at synth that the alarms reach nobody while a stage has no alarmEmail', () => {
    expect(STAGE_CONFIG.prod.alarmEmail).toBeUndefined();
    Annotations.fromStack(prod.service.stateful).hasWarning(
      '*',
      Match.stringLikeRegexp('vps-prod: no alarmEmail, so the alarms notify a topic nobody is subscribed to'),
    );
  });

  it('reviews the access of every route (no default-profile warnings)', () => {
    Annotations.fromStack(dev.service.api).hasNoWarning(
      '*',
      Match.stringLikeRegexp('has no entry in infra/route-access.ts'),
    );
    for (const route of ROUTES) expect(ROUTE_ACCESS, route.name).toHaveProperty(route.name);
  });
});

describe('functions and routes', () => {
  it('creates one function per route, plus the authorizer and the import worker', () => {
    const count = Object.keys(resources(dev.api, 'AWS::Lambda::Function')).length;
    expect(count).toBe(ROUTES.length + 1 + (WORKER_EXISTS ? 1 : 0));
  });

  it('wires every route of ROUTES to its own function, method and path', () => {
    const all = methods(dev.api);
    const publicApi = restApiId(dev.api, 'vps-dev-public');
    const adminApi = restApiId(dev.api, 'vps-dev-admin');
    for (const route of ROUTES) {
      const fnId = functionId(dev.api, `vps-dev-${route.name}`);
      expect(resources(dev.api)[fnId]!.Properties!.Handler, route.name).toBe(`index.${route.handler}`);
      // A GET route's function also answers its HEAD method (the next test).
      const wired = all.filter((m) => m.target.includes(`"${fnId}"`) && m.httpMethod !== 'HEAD');
      expect(wired, route.name).toHaveLength(1);
      expect(wired[0], route.name).toMatchObject({
        path: route.path,
        httpMethod: route.method,
        integrationType: 'AWS_PROXY',
        restApi: route.access === 'public' ? publicApi : adminApi,
      });
    }
  });

  it('puts public routes behind the search-id authorizer with an API key required', () => {
    const authorizer = Object.keys(resources(dev.api, 'AWS::ApiGateway::Authorizer'))[0];
    for (const route of PUBLIC) {
      const method = methods(dev.api).find((m) => m.path === route.path && m.httpMethod === route.method)!;
      expect(method, route.name).toMatchObject({
        authorizationType: 'CUSTOM',
        apiKeyRequired: true,
        authorizer,
      });
    }
  });

  it('answers CORS preflights of public routes at the gateway, without a backend', () => {
    for (const route of PUBLIC) {
      const preflight = methods(dev.api).find((m) => m.path === route.path && m.httpMethod === 'OPTIONS');
      expect(preflight, route.name).toMatchObject({ authorizationType: 'NONE', integrationType: 'MOCK' });
    }
    // Allowing the headers the local server allows (tracing ones included), kept as long
    const answers = Object.values(resources(dev.api, 'AWS::ApiGateway::Method'))
      .filter((m) => m.Properties!.HttpMethod === 'OPTIONS')
      .map((m) => {
        const integration = m.Properties!.Integration as {
          IntegrationResponses: { ResponseParameters: Record<string, string> }[];
        };
        return integration.IntegrationResponses[0]!.ResponseParameters;
      });
    expect(answers.length).toBeGreaterThanOrEqual(PUBLIC.length); // (every resource of the API has one)
    for (const answer of answers) {
      expect(answer['method.response.header.Access-Control-Allow-Headers']).toBe(
        `'${ALLOWED_REQUEST_HEADERS.join(',')}'`,
      );
      expect(answer['method.response.header.Access-Control-Max-Age']).toBe(`'${PREFLIGHT_MAX_AGE_SECONDS}'`);
      // Any origin, the same answer for each, so no Vary (the local server's preflight answers the same).
      expect(answer['method.response.header.Access-Control-Allow-Origin']).toBe("'*'");
      expect(answer['method.response.header.Vary']).toBeUndefined();
    }
    expect(methods(dev.api).filter((m) => m.httpMethod === 'OPTIONS' && m.path.startsWith('/admin'))).toEqual(
      [],
    );
  });

  it('protects admin routes with IAM', () => {
    for (const route of ADMIN) {
      const method = methods(dev.api).find((m) => m.path === route.path && m.httpMethod === route.method)!;
      expect(method.authorizationType, route.name).toBe('AWS_IAM');
    }
  });

  it('uses Node.js 24 on one architecture for every function and layer', () => {
    for (const fn of Object.values(resources(dev.api, 'AWS::Lambda::Function'))) {
      expect(fn.Properties).toMatchObject({ Runtime: 'nodejs24.x', Architectures: ['x86_64'] });
    }
    for (const layer of Object.values(resources(dev.api, 'AWS::Lambda::LayerVersion'))) {
      expect(layer.Properties).toMatchObject({
        CompatibleArchitectures: ['x86_64'],
        CompatibleRuntimes: ['nodejs24.x'],
      });
    }
  });
});

describe('response compression', () => {
  it('compresses answers from COMPRESSION_MIN_BYTES on both APIs, as the local server does', () => {
    for (const name of ['vps-dev-public', 'vps-dev-admin'])
      dev.api.hasResourceProperties('AWS::ApiGateway::RestApi', {
        Name: name,
        MinimumCompressionSize: COMPRESSION_MIN_BYTES,
      });
  });
});

describe('access logs', () => {
  it("name each request's key, IAM caller, latencies and errors, never the key itself, as JSON", () => {
    const stages = Object.values(resources(dev.api, 'AWS::ApiGateway::Stage'));
    expect(stages).toHaveLength(2);
    for (const stage of stages) {
      const format = (stage.Properties!.AccessLogSetting as { Format: string }).Format;
      // Substituted values stay JSON strings (a quoted variable in a quoted value would not).
      const fields = JSON.parse(format) as Record<string, string>;
      expect(fields).toMatchObject({
        requestId: '$context.requestId',
        ip: '$context.identity.sourceIp',
        status: '$context.status',
        resourcePath: '$context.resourcePath',
        principalId: '$context.authorizer.principalId',
        apiKeyId: '$context.identity.apiKeyId',
        userArn: '$context.identity.userArn',
        responseLatency: '$context.responseLatency',
        integrationLatency: '$context.integrationLatency',
        integrationStatus: '$context.integrationStatus',
        integrationError: '$context.integrationErrorMessage',
        errorMessage: '$context.error.message',
        errorType: '$context.error.responseType',
        authorizerStatus: '$context.authorizer.status',
      });
      expect(Object.values(fields)).not.toContain('$context.identity.apiKey');
      expect(format).not.toContain('messageString');
    }
  });
});

describe('search-id authorizer and usage plans', () => {
  it('lets the authorizer supply the API key (apiKeySource AUTHORIZER)', () => {
    dev.api.hasResourceProperties('AWS::ApiGateway::RestApi', {
      Name: 'vps-dev-public',
      ApiKeySourceType: 'AUTHORIZER',
    });
  });

  it('calls the authorizer for every request, including those without Authorization (no identity source, no cache)', () => {
    const [authorizer] = Object.values(resources(dev.api, 'AWS::ApiGateway::Authorizer'));
    expect(authorizer!.Properties).toMatchObject({ Type: 'REQUEST', AuthorizerResultTtlInSeconds: 0 });
    expect(authorizer!.Properties).not.toHaveProperty('IdentitySource');
    expect(JSON.stringify(authorizer!.Properties!.AuthorizerUri)).toContain(
      functionId(dev.api, 'vps-dev-Authorizer'),
    );
  });

  it('meters body-authenticated requests under the shared key the authorizer reports', () => {
    const authorizerFn = resources(dev.api)[functionId(dev.api, 'vps-dev-Authorizer')]!;
    const sharedKey = (authorizerFn.Properties!.Environment as { Variables: Record<string, string> })
      .Variables.GATEWAY_SHARED_KEY;
    dev.api.hasResourceProperties('AWS::ApiGateway::ApiKey', { Value: sharedKey, Enabled: true });
    const [sharedPlan] = Object.entries(resources(dev.api, 'AWS::ApiGateway::UsagePlan')).find(
      ([, p]) => p.Properties?.UsagePlanName === 'Shared',
    )!;
    dev.api.hasResourceProperties('AWS::ApiGateway::UsagePlanKey', {
      UsagePlanId: { Ref: sharedPlan },
      KeyType: 'API_KEY',
    });
  });

  it.each(['dev', 'prod'] as const)(
    'declares the Free and Pro usage plans with the %s throttle and daily quota',
    (stage) => {
      const synthesised = stage === 'dev' ? dev : prod;
      const plans = STAGE_CONFIG[stage].plans;
      for (const [name, limits] of [
        ['Free', plans.free],
        ['Pro', plans.pro],
      ] as const) {
        synthesised.api.hasResourceProperties('AWS::ApiGateway::UsagePlan', {
          UsagePlanName: name,
          Throttle: { RateLimit: limits.rateLimit, BurstLimit: limits.burstLimit },
          Quota: { Limit: limits.dailyQuota, Period: 'DAY' },
          ApiStages: [Match.objectLike({ Stage: Match.anyValue() })],
        });
      }
    },
  );

  it.each(['dev', 'prod'] as const)(
    'declares an Enterprise usage plan with the %s throttle and no daily quota',
    (stage) => {
      const synthesised = stage === 'dev' ? dev : prod;
      const limits = STAGE_CONFIG[stage].plans.enterprise;
      synthesised.api.hasResourceProperties('AWS::ApiGateway::UsagePlan', {
        UsagePlanName: 'Enterprise',
        Throttle: { RateLimit: limits.rateLimit, BurstLimit: limits.burstLimit },
        Quota: Match.absent(),
        ApiStages: [Match.objectLike({ Stage: Match.anyValue() })],
      });
    },
  );

  it.each(['dev', 'prod'] as const)(
    "lets a %s search id in the header spend its plan's hourly limit every hour at the gateway",
    (stage) => {
      const { plans, hourlyLimits, stageThrottle } = STAGE_CONFIG[stage];
      for (const plan of ['free', 'pro', 'enterprise'] as const) {
        const limits = plans[plan];
        // The application's rolling hour stays the authoritative limit: no daily quota cuts in first...
        if (limits.dailyQuota !== undefined)
          expect(limits.dailyQuota, plan).toBeGreaterThanOrEqual(24 * hourlyLimits[plan]);
        // ...and the steady rate allows the hour's requests, within the stage's throttle.
        expect(limits.rateLimit * 3600, plan).toBeGreaterThanOrEqual(hourlyLimits[plan]);
        expect(limits.rateLimit, plan).toBeLessThanOrEqual(stageThrottle.rateLimit);
        expect(limits.burstLimit, plan).toBeGreaterThanOrEqual(limits.rateLimit);
      }
      expect(plans.enterprise.dailyQuota).toBeUndefined();
    },
  );

  it.each(['dev', 'prod'] as const)(
    'never lets the %s daily quota refuse a search id whose client honours Retry-After',
    (stage) => {
      const { plans, hourlyLimits } = STAGE_CONFIG[stage];
      for (const plan of ['free', 'pro'] as const) {
        const limit = hourlyLimits[plan];
        // The gateway counts admitted requests and the application's 429s alike. A rolling hour admits at
        // most 23 limits in a UTC day (its 288 steps hold 22 spans of 13 steps and 2 more), and a client
        // that waits out each Retry-After (always at least the next step's edge) gets at most one 429 a
        // step. A quota of 24 limits was short by up to 188 on Free: a client that had spread its requests
        // over the hour gets a few slots back at every step, and a 429 there.
        expect(plans[plan].dailyQuota, plan).toBeGreaterThanOrEqual(23 * limit + 288);
        // That client, on the application's own rules: 90% of the limit an hour for a day, then twice it.
        const counted = new Map<number, number>();
        const perDay = new Map<string, number>();
        const start = Date.parse('2026-11-01T00:00:00Z');
        for (let t = start; t < start + 3 * 86_400_000;) {
          const now = new Date(t);
          const bucket = bucketStart(now);
          const previous = Array.from(
            { length: 12 },
            (_, i) => counted.get(bucket - (i + 1) * BUCKET_MS) ?? 0,
          );
          const current = counted.get(bucket) ?? 0;
          const day = now.toISOString().slice(0, 10);
          perDay.set(day, (perDay.get(day) ?? 0) + 1);
          if (current < currentBucketCapacity(limit, previous)) {
            counted.set(bucket, current + 1);
            t += (t < start + 86_400_000 ? 3_600_000 / (0.9 * limit) : 3_600_000 / (2 * limit)) | 0;
          } else t += retryAfterSeconds(limit, previous, current, now) * 1000;
        }
        for (const [day, requests] of perDay)
          expect(requests, `${plan} ${day}`).toBeLessThanOrEqual(plans[plan].dailyQuota!);
      }
    },
  );

  it('gives every GET route a HEAD method with the same function and authorisation', () => {
    const all = methods(dev.api);
    const gets = ROUTES.filter((route) => route.method === 'GET');
    for (const route of gets) {
      const get = all.find((m) => m.path === route.path && m.httpMethod === 'GET')!;
      const head = all.find((m) => m.path === route.path && m.httpMethod === 'HEAD');
      expect(head, route.name).toEqual({ ...get, httpMethod: 'HEAD' });
    }
    // Only there: a HEAD beside a path without GET would reach a function that does not answer it.
    expect(all.filter((m) => m.httpMethod === 'HEAD')).toHaveLength(gets.length);
  });

  it("lets a browser read the headers of the public API's gateway errors, as of its handlers' answers", () => {
    for (const [template, kind] of [
      [dev.api, 'public'],
      [dev.api, 'admin'],
    ] as const) {
      const throttled = Object.values(resources(template, 'AWS::ApiGateway::GatewayResponse'))
        .map((response) => response.Properties as Record<string, unknown>)
        .filter((response) => response.ResponseType === 'THROTTLED')
        .find((response) =>
          JSON.stringify(response.RestApiId).includes(kind === 'public' ? 'Public' : 'Admin'),
        )!;
      const headers = throttled.ResponseParameters as Record<string, string>;
      const exposed = headers['gatewayresponse.header.Access-Control-Expose-Headers'];
      if (kind === 'public') expect(exposed).toBe(`'${EXPOSED_HEADERS}'`);
      else expect(exposed).toBeUndefined();
    }
  });

  it('gives every gateway error of both APIs the X-Request-Id header of the handlers, default 4xx included', () => {
    const responses = Object.values(resources(dev.api, 'AWS::ApiGateway::GatewayResponse')).map(
      (response) => response.Properties as Record<string, unknown>,
    );
    for (const api of ['Public', 'Admin']) {
      const ofApi = responses.filter((response) => JSON.stringify(response.RestApiId).includes(api));
      expect(ofApi.length, api).toBeGreaterThan(1);
      for (const response of ofApi)
        expect(response.ResponseParameters, `${api} ${String(response.ResponseType)}`).toMatchObject({
          'gatewayresponse.header.X-Request-Id': 'context.requestId',
        });
      // The other 4xx keep their own status, and carry the id and (public) the CORS headers too.
      const default4xx = ofApi.find((response) => response.ResponseType === 'DEFAULT_4XX');
      expect(default4xx, api).toBeDefined();
      expect(default4xx!.StatusCode, api).toBeUndefined();
      expect(JSON.stringify(default4xx!.ResponseTemplates)).toContain('$context.requestId');
      expect(
        (default4xx!.ResponseParameters as Record<string, string>)[
          'gatewayresponse.header.Access-Control-Allow-Origin'
        ],
        api,
      ).toBe(api === 'Public' ? "'*'" : undefined);
    }
  });

  it('answers gateway refusals in the service error shape', () => {
    dev.api.hasResourceProperties('AWS::ApiGateway::GatewayResponse', {
      ResponseType: 'INVALID_API_KEY',
      StatusCode: '401',
      ResponseTemplates: { 'application/json': Match.stringLikeRegexp('"code":"invalid_search_id"') },
      ResponseParameters: Match.objectLike({
        'gatewayresponse.header.WWW-Authenticate': `'Bearer realm="search", error="invalid_token"'`,
      }),
    });
    dev.api.hasResourceProperties('AWS::ApiGateway::GatewayResponse', {
      ResponseType: 'THROTTLED',
      StatusCode: '429',
    });
  });
});

describe('stateful resources', () => {
  it('declares every table of TABLES with its keys, indexes, PITR, encryption and TTL', () => {
    for (const definition of TABLES) {
      dev.stateful.hasResourceProperties('AWS::DynamoDB::Table', {
        TableName: `vps-dev-${definition.configKey}`,
        KeySchema: [
          { AttributeName: definition.partitionKey, KeyType: 'HASH' },
          ...(definition.sortKey ? [{ AttributeName: definition.sortKey, KeyType: 'RANGE' }] : []),
        ],
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
        SSESpecification: { SSEEnabled: true },
        ...(definition.ttlAttribute
          ? { TimeToLiveSpecification: { AttributeName: definition.ttlAttribute, Enabled: true } }
          : {}),
        ...(definition.indexes.length
          ? {
              GlobalSecondaryIndexes: definition.indexes.map((index) =>
                Match.objectLike({ IndexName: index.name }),
              ),
            }
          : {}),
      });
    }
  });

  it('encrypts, versions and closes the assets bucket and enforces TLS', () => {
    dev.stateful.hasResourceProperties('AWS::S3::Bucket', {
      BucketName: 'vps-dev-assets-111111111111-eu-west-1',
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }],
      },
      VersioningConfiguration: { Status: 'Enabled' },
      LifecycleConfiguration: {
        Rules: Match.arrayWith([
          Match.objectLike({ AbortIncompleteMultipartUpload: { DaysAfterInitiation: 1 }, Status: 'Enabled' }),
        ]),
      },
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
    });
    dev.stateful.hasResourceProperties('AWS::S3::BucketPolicy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        ]),
      },
    });
  });

  it('runs an encrypted OpenSearch 2.x domain (k-NN) reachable only by signed requests of the account', () => {
    dev.stateful.hasResourceProperties('AWS::OpenSearchService::Domain', {
      EngineVersion: Match.stringLikeRegexp('^OpenSearch_2\\.'),
      EncryptionAtRestOptions: { Enabled: true },
      NodeToNodeEncryptionOptions: { Enabled: true },
      DomainEndpointOptions: Match.objectLike({ EnforceHTTPS: true }),
    });
    const [domain] = Object.values(resources(dev.stateful, 'AWS::OpenSearchService::Domain'));
    const statements = (
      domain!.Properties!.AccessPolicies as { Statement: { Effect: string; Principal: { AWS: unknown } }[] }
    ).Statement;
    expect(statements).toHaveLength(1);
    expect(statements[0]!.Effect).toBe('Allow');
    expect(placeholder(statements[0]!.Principal.AWS)).toMatch(/^arn:token:iam::111111111111:root$/);
  });

  it('raises the clause limit so that a full visual-word query fits', () => {
    for (const stage of [dev, prod]) {
      const [domain] = Object.values(resources(stage.stateful, 'AWS::OpenSearchService::Domain'));
      const options = domain!.Properties!.AdvancedOptions as Record<string, string>;
      // The service takes advanced options as strings.
      expect(options['indices.query.bool.max_clause_count']).toBe(String(SEARCH_MAX_CLAUSE_COUNT));
    }
    expect(SEARCH_MAX_CLAUSE_COUNT).toBeGreaterThanOrEqual(
      VISUAL_WORD_MAX_QUERY_TERMS + VISUAL_WORD_FILTER_CLAUSES,
    );
  });

  it('covers the visual-word index with the product-index grants of every function that uses OpenSearch', () => {
    const index = visualWordIndexName(OPENSEARCH_INDEX_PREFIX);
    const wildcard = (pattern: string): RegExp =>
      new RegExp(
        `^${pattern
          .split('*')
          .map((part) => part.replace(/[.+?^${}()|[\]\\/]/g, '\\$&'))
          .join('.*')}$`,
      );
    let users = 0;
    for (const route of ROUTES) {
      const statements = statementsOf(dev.api, functionId(dev.api, `vps-dev-${route.name}`));
      const granted = (action: string): string[] =>
        statements
          .filter((statement) => statement.Effect === 'Allow' && actionsOf(statement).includes(action))
          .flatMap((statement) =>
            Array.isArray(statement.Resource) ? statement.Resource : [statement.Resource],
          )
          .map(placeholder)
          .filter((resource) => resource.includes(`/${OPENSEARCH_INDEX_PREFIX}*`));
      const posts = granted('es:ESHttpPost');
      if (posts.length === 0) continue;
      users += 1;
      const domain = posts[0]!.slice(0, posts[0]!.indexOf(`/${OPENSEARCH_INDEX_PREFIX}*`));
      const covers = (patterns: string[], path: string): boolean =>
        patterns.some((pattern) => wildcard(pattern).test(`${domain}/${path}`));
      expect(covers(posts, `${index}/_search`), route.name).toBe(true);
      const puts = granted('es:ESHttpPut');
      if (puts.length > 0) {
        expect(covers(puts, index), route.name).toBe(true);
        expect(covers(posts, `${index}/_delete_by_query`), route.name).toBe(true);
      }
    }
    expect(users).toBeGreaterThan(0);
  });

  it('retains data in prod and destroys it in dev', () => {
    for (const type of ['AWS::DynamoDB::Table', 'AWS::S3::Bucket', 'AWS::OpenSearchService::Domain']) {
      for (const resource of Object.values(resources(prod.stateful, type)))
        expect(resource.DeletionPolicy, type).toBe('Retain');
      for (const resource of Object.values(resources(dev.stateful, type)))
        expect(resource.DeletionPolicy, type).toBe('Delete');
    }
    prod.stateful.hasResourceProperties('AWS::DynamoDB::Table', { DeletionProtectionEnabled: true });
  });

  it('sends import request markers from the bucket to the import queue', () => {
    dev.stateful.hasResourceProperties('AWS::S3::Bucket', {
      NotificationConfiguration: {
        QueueConfigurations: [
          Match.objectLike({
            Event: 's3:ObjectCreated:*',
            Filter: {
              S3Key: {
                Rules: Match.arrayWith([
                  { Name: 'prefix', Value: 'imports/' },
                  { Name: 'suffix', Value: '/request.json' },
                ]),
              },
            },
          }),
        ],
      },
    });
  });

  it('lets only the bucket send to the import queue, over TLS, in one queue policy', () => {
    const [queueId] = Object.keys(resources(dev.stateful, 'AWS::SQS::Queue')).filter((id) =>
      id.startsWith('ImportQueue'),
    );
    const policies = Object.values(resources(dev.stateful, 'AWS::SQS::QueuePolicy')).filter(
      (policy) => JSON.stringify(policy.Properties!.Queues) === JSON.stringify([{ Ref: queueId }]),
    );
    expect(policies).toHaveLength(1);
    const statements = (
      policies[0]!.Properties!.PolicyDocument as {
        Statement: { Effect: string; Principal: unknown; Condition: unknown }[];
      }
    ).Statement;
    expect(statements).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        expect.objectContaining({ Effect: 'Allow', Principal: { Service: 's3.amazonaws.com' } }),
      ]),
    );
    const bucket = Object.values(resources(dev.stateful, 'AWS::S3::Bucket')).find(
      (b) => b.Properties?.NotificationConfiguration,
    ) as unknown as { DependsOn: string[] };
    expect(bucket.DependsOn.some((id) => id.startsWith('ImportQueuePolicy'))).toBe(true);
  });

  it.runIf(WORKER_EXISTS)('triggers the import worker from the import queue', () => {
    dev.api.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      FunctionName: { Ref: functionId(dev.api, 'vps-dev-ImportWorker') },
      FunctionResponseTypes: ['ReportBatchItemFailures'],
    });
  });

  it.runIf(WORKER_EXISTS)('lets the import worker back off a failed trigger and send a deferred one', () => {
    const worker = functionId(dev.api, 'vps-dev-ImportWorker');
    const onQueue = actionsOn(statementsOf(dev.api, worker), 'ImportQueue');
    for (const action of ['sqs:ChangeMessageVisibility', 'sqs:SendMessage'])
      expect(onQueue.has(action), action).toBe(true);
    const env = (
      resources(dev.api)[worker]!.Properties!.Environment as { Variables: Record<string, unknown> }
    ).Variables;
    expect(JSON.stringify(env.IMPORT_QUEUE_URL)).toContain('ImportQueue');
    // No other function may send to the queue or learns its address.
    for (const route of ROUTES) {
      const name = `vps-dev-${route.name}`;
      expect(actionsOn(statementsOf(dev.api, functionId(dev.api, name)), 'ImportQueue').size, name).toBe(0);
    }
  });
});

describe('alarms', () => {
  /** The alarm of that name in a template, with its metric and actions. */
  function alarmNamed(template: Synthesised['api'], name: string) {
    const found = Object.values(resources(template, 'AWS::CloudWatch::Alarm')).find(
      (alarm) => alarm.Properties?.AlarmName === name,
    );
    expect(found, name).toBeDefined();
    return found!.Properties! as {
      MetricName: string;
      Namespace: string;
      Dimensions: { Name: string; Value: unknown }[];
      Threshold: number;
      ComparisonOperator: string;
      Statistic: string;
      Period: number;
      EvaluationPeriods: number;
      Metrics?: MetricQuery[];
      AlarmActions: unknown[];
      OKActions: unknown[];
    };
  }

  interface MetricQuery {
    Id: string;
    Expression?: string;
    ReturnData?: boolean;
    MetricStat?: {
      Metric: { Namespace: string; MetricName: string; Dimensions?: { Name: string; Value: unknown }[] };
      Period: number;
      Stat: string;
    };
  }

  /** The metric (namespace, name, statistic, period, dimensions) of a math alarm's query with that id. */
  function queryOf(alarm: ReturnType<typeof alarmNamed>, id: string) {
    const stat = alarm.Metrics!.find((query) => query.Id === id)!.MetricStat!;
    return {
      namespace: stat.Metric.Namespace,
      metricName: stat.Metric.MetricName,
      stat: stat.Stat,
      period: stat.Period,
      dimensions: JSON.stringify(stat.Metric.Dimensions),
    };
  }

  /** The expression a math alarm watches. */
  function expressionOf(alarm: ReturnType<typeof alarmNamed>): string {
    return alarm.Metrics!.find((query) => query.ReturnData !== false && query.Expression)!.Expression!;
  }

  /**
   * Evaluates errorRate's expression (infra/constructs/alarms.ts) for one period, as CloudWatch would:
   * the test reads the floor from the template rather than repeating it.
   */
  function rate(expression: string, errors: number, requests: number): number {
    const match = /^IF\(errors >= (\d+), 100 \* errors \/ requests, 0\)$/.exec(expression);
    expect(match, expression).not.toBeNull();
    return errors >= Number(match![1]) ? (100 * errors) / requests : 0;
  }

  /** Both actions of an alarm of the API stack go to the stateful stack's topic. */
  function notifiesTopic(alarm: ReturnType<typeof alarmNamed>, name: string): void {
    for (const targets of [alarm.AlarmActions, alarm.OKActions]) {
      expect(targets, name).toHaveLength(1);
      expect(JSON.stringify(targets[0]), name).toMatch(/Fn::ImportValue.*Alarms/);
    }
  }

  it("raises the stage's alarms, each notifying the alarm topic when it fires and when it clears", () => {
    const [topicId] = Object.keys(resources(dev.stateful, 'AWS::SNS::Topic'));
    const expected: [Synthesised['api'], string, string, string, number][] = [
      [dev.stateful, 'vps-dev-import-dead-letters', 'AWS/SQS', 'ApproximateNumberOfMessagesVisible', 1],
      [dev.stateful, 'vps-dev-import-queue-stalled', 'AWS/SQS', 'ApproximateAgeOfOldestMessage', 3600],
      [dev.stateful, 'vps-dev-search-cluster-red', 'AWS/ES', 'ClusterStatus.red', 1],
      [dev.stateful, 'vps-dev-search-writes-blocked', 'AWS/ES', 'ClusterIndexWritesBlocked', 1],
      [dev.stateful, 'vps-dev-search-storage-low', 'AWS/ES', 'FreeStorageSpace', 20 * 1024 * 0.2],
      [prod.stateful, 'vps-prod-search-storage-low', 'AWS/ES', 'FreeStorageSpace', 100 * 1024 * 0.2],
      [dev.stateful, 'vps-dev-search-jvm-pressure', 'AWS/ES', 'JVMMemoryPressure', 95],
      [dev.stateful, 'vps-dev-search-cpu-high', 'AWS/ES', 'CPUUtilization', 80],
      [dev.api, 'vps-dev-admin-api-5xx', 'AWS/ApiGateway', '5XXError', 3],
    ];
    for (const [template, name, namespace, metric, threshold] of expected) {
      const alarm = alarmNamed(template, name);
      expect([alarm.Namespace, alarm.MetricName, alarm.Threshold], name).toEqual([
        namespace,
        metric,
        threshold,
      ]);
      for (const targets of [alarm.AlarmActions, alarm.OKActions]) {
        expect(targets, name).toHaveLength(1);
        // The stateful stack refers to its topic; the API stack imports the topic's ARN.
        expect(JSON.stringify(targets[0]), name).toMatch(
          template === dev.api ? /Fn::ImportValue.*Alarms/ : new RegExp(`"Ref":"${topicId}"`),
        );
      }
    }
    // The dead letters are those of the import queue's dead-letter queue; the 5xx those of the public API.
    const [dlqId] = Object.entries(resources(dev.stateful, 'AWS::SQS::Queue'))
      .filter(([, queue]) => queue.Properties?.QueueName === 'vps-dev-imports-dlq')
      .map(([id]) => id);
    expect(JSON.stringify(alarmNamed(dev.stateful, 'vps-dev-import-dead-letters').Dimensions)).toContain(
      dlqId,
    );
    expect(alarmNamed(dev.api, 'vps-dev-admin-api-5xx').Dimensions).toContainEqual({
      Name: 'ApiName',
      Value: 'vps-dev-admin',
    });
    expect(alarmNamed(dev.stateful, 'vps-dev-search-storage-low').ComparisonOperator).toBe(
      'LessThanOrEqualToThreshold',
    );
    // AWS's recommended alarms for the domain: the fullest node's heap at 95% for 3 one-minute periods, its
    // CPU at 80% for 3 fifteen-minute periods.
    for (const [name, period] of [
      ['vps-dev-search-jvm-pressure', 60],
      ['vps-dev-search-cpu-high', 900],
    ] as const) {
      const alarm = alarmNamed(dev.stateful, name);
      expect(
        [alarm.Statistic, alarm.Period, alarm.EvaluationPeriods, alarm.ComparisonOperator],
        name,
      ).toEqual(['Maximum', period, 3, 'GreaterThanOrEqualToThreshold']);
    }
  });

  it("pages on the public API's 5xx as a share of its requests, from a few 5xx on, not on a lone one", () => {
    const alarm = alarmNamed(dev.api, 'vps-dev-public-api-5xx');
    notifiesTopic(alarm, 'vps-dev-public-api-5xx');
    const api = JSON.stringify([{ Name: 'ApiName', Value: 'vps-dev-public' }]);
    expect(queryOf(alarm, 'errors')).toEqual({
      namespace: 'AWS/ApiGateway',
      metricName: '5XXError',
      stat: 'Sum',
      period: 300,
      dimensions: api,
    });
    expect(queryOf(alarm, 'requests')).toEqual({
      namespace: 'AWS/ApiGateway',
      metricName: 'Count',
      stat: 'Sum',
      period: 300,
      dimensions: api,
    });
    expect([alarm.Threshold, alarm.ComparisonOperator, alarm.EvaluationPeriods]).toEqual([
      5,
      'GreaterThanOrEqualToThreshold',
      1,
    ]);
    const pages = (errors: number, requests: number) =>
      rate(expressionOf(alarm), errors, requests) >= alarm.Threshold;
    expect(pages(1, 1), 'one 5xx of the one request at 3 a.m.').toBe(false);
    expect(pages(5, 5), 'a total outage at low traffic').toBe(true);
    expect(pages(10, 100), '10% of a busy period').toBe(true);
    expect(pages(20, 10_000), '0.2% at high traffic').toBe(false);
  });

  it("pages when the public stage's p99 latency stays over 5 s for 15 minutes of real traffic", () => {
    const alarm = alarmNamed(dev.api, 'vps-dev-public-api-latency');
    notifiesTopic(alarm, 'vps-dev-public-api-latency');
    expect(expressionOf(alarm)).toBe('IF(requests >= 20, latency, 0)');
    const latency = queryOf(alarm, 'latency');
    expect([latency.namespace, latency.metricName, latency.stat, latency.period]).toEqual([
      'AWS/ApiGateway',
      'Latency',
      'p99',
      300,
    ]);
    // The public stage's (not the API-wide metric): both dimensions.
    expect(latency.dimensions).toContain('"Name":"ApiName","Value":"vps-dev-public"');
    expect(latency.dimensions).toContain('"Name":"Stage"');
    expect(queryOf(alarm, 'requests')).toMatchObject({ metricName: 'Count', stat: 'Sum', period: 300 });
    expect([alarm.Threshold, alarm.ComparisonOperator, alarm.EvaluationPeriods]).toEqual([
      5000,
      'GreaterThanThreshold',
      3,
    ]);
  });

  it('gives every function an errors and a throttles alarm, sized to its traffic', () => {
    const functions = [
      ...ROUTES.map((route) => [route.name, route.access] as const),
      ['Authorizer', 'public'] as const,
      ...(WORKER_EXISTS ? [['ImportWorker', 'worker'] as const] : []),
    ];
    for (const [name, kind] of functions) {
      const fnId = functionId(dev.api, `vps-dev-${name}`);
      const ofFunction = JSON.stringify([{ Name: 'FunctionName', Value: { Ref: fnId } }]);
      const errors = alarmNamed(dev.api, `vps-dev-${name}-errors`);
      const throttles = alarmNamed(dev.api, `vps-dev-${name}-throttles`);
      notifiesTopic(errors, name);
      notifiesTopic(throttles, name);
      expect(errors.ComparisonOperator, name).toBe('GreaterThanOrEqualToThreshold');
      if (kind === 'public') {
        // A share of its invocations, as the public API's 5xx.
        expect(queryOf(errors, 'errors'), name).toMatchObject({
          metricName: 'Errors',
          stat: 'Sum',
          period: 300,
        });
        expect(queryOf(errors, 'requests'), name).toMatchObject({ metricName: 'Invocations', stat: 'Sum' });
        expect(queryOf(errors, 'errors').dimensions, name).toBe(ofFunction);
        expect(queryOf(errors, 'requests').dimensions, name).toBe(ofFunction);
        expect(rate(expressionOf(errors), 1, 1) >= errors.Threshold, name).toBe(false);
        expect(rate(expressionOf(errors), 5, 50) >= errors.Threshold, name).toBe(true);
      } else {
        expect([errors.Namespace, errors.MetricName, errors.Statistic], name).toEqual([
          'AWS/Lambda',
          'Errors',
          'Sum',
        ]);
        expect(JSON.stringify(errors.Dimensions), name).toBe(ofFunction);
        // Admin: a few crashes in 5 minutes; the worker: a repeat within the hour.
        expect([errors.Threshold, errors.Period], name).toEqual(kind === 'admin' ? [3, 300] : [2, 3600]);
      }
      expect(
        [
          throttles.MetricName,
          throttles.Statistic,
          throttles.Period,
          throttles.Threshold,
          throttles.ComparisonOperator,
        ],
        name,
      ).toEqual(['Throttles', 'Sum', 300, 1, 'GreaterThanOrEqualToThreshold']);
      expect(JSON.stringify(throttles.Dimensions), name).toBe(ofFunction);
      // SQS retries a throttled poll: only a lasting throttle of the worker delays imports.
      expect(throttles.EvaluationPeriods, name).toBe(kind === 'worker' ? 3 : 1);
    }
  });

  it("lets CloudWatch, for the stage's alarms only, publish to the encrypted topic and use its key", () => {
    const [topic] = Object.values(resources(dev.stateful, 'AWS::SNS::Topic'));
    const keyRef = topic!.Properties!.KmsMasterKeyId as { 'Fn::GetAtt': [string, string] };
    const key = resources(dev.stateful)[keyRef['Fn::GetAtt'][0]]!;
    expect(key.Properties!.EnableKeyRotation).toBe(true);
    const keyStatements = (key.Properties!.KeyPolicy as { Statement: Record<string, unknown>[] }).Statement;
    const topicStatements = Object.values(resources(dev.stateful, 'AWS::SNS::TopicPolicy')).flatMap(
      (policy) => (policy.Properties!.PolicyDocument as { Statement: Record<string, unknown>[] }).Statement,
    );
    for (const [statements, action] of [
      [keyStatements, 'kms:Decrypt'],
      [topicStatements, 'sns:Publish'],
    ] as const) {
      const forCloudWatch = statements.filter(
        (statement) =>
          JSON.stringify(statement.Principal) === JSON.stringify({ Service: 'cloudwatch.amazonaws.com' }),
      );
      expect(forCloudWatch, action).toHaveLength(1);
      expect(JSON.stringify(forCloudWatch[0]!.Action)).toContain(action);
      expect(JSON.stringify(forCloudWatch[0]!.Condition)).toContain(':alarm:vps-dev-*');
    }
    // No e-mail configured for dev: no subscription.
    expect(Object.keys(resources(dev.stateful, 'AWS::SNS::Subscription'))).toEqual([]);
  });

  /** The JSON lines logImportEnd writes through the real logger (lib/log.ts) for an import that ended so. */
  function importEndLine(record: Partial<ImportRecord>): Record<string, unknown> {
    const lines: string[] = [];
    const capture = (chunk: unknown) => (lines.push(String(chunk)), true);
    const out = vi.spyOn(process.stdout, 'write').mockImplementation(capture);
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(capture);
    try {
      const base = { feedId: 'shop', importId: 'imp-1', total: 3, processed: 3, embedded: 0 };
      logImportEnd(createLogger('info', { stage: 'dev' }), { ...base, ...record } as ImportRecord, 12);
    } finally {
      out.mockRestore();
      err.mockRestore();
    }
    expect(lines).toHaveLength(1);
    return JSON.parse(lines[0]!) as Record<string, unknown>;
  }

  /** A CloudWatch Logs JSON pattern of `($.field = "value")` terms joined by &&, as CDK renders them. */
  function matches(pattern: string, line: Record<string, unknown>): boolean {
    const terms = [...pattern.matchAll(/\(\$\.(\w+) = "([^"]*)"\)/g)];
    expect(pattern.replace(/\(\$\.\w+ = "[^"]*"\)/g, '').replace(/[{}&\s]/g, '')).toBe('');
    return terms.every(([, field, value]) =>
      value === '*' ? typeof line[field!] === 'string' : line[field!] === value,
    );
  }

  it.runIf(WORKER_EXISTS)(
    "counts failed imports from the worker's log, and pages only on many in an hour",
    () => {
      const filters = Object.values(resources(dev.api, 'AWS::Logs::MetricFilter'));
      expect(filters).toHaveLength(1);
      const filter = filters[0]!.Properties! as {
        FilterPattern: string;
        LogGroupName: { Ref: string };
        MetricTransformations: Record<string, unknown>[];
      };
      // The worker's own log group.
      expect(resources(dev.api)[filter.LogGroupName.Ref]!.Properties!.LogGroupName).toBe(
        '/aws/lambda/vps-dev-ImportWorker',
      );
      expect(filter.MetricTransformations).toEqual([
        { MetricNamespace: 'vps-dev', MetricName: 'FailedImports', MetricValue: '1', DefaultValue: 0 },
      ]);
      // Matched against the line the worker writes: a failed import (with or without its reason), not a
      // succeeded one nor a request line.
      const failed = importEndLine({ status: 'failed', message: 'The feed URL answered 404.' });
      expect(failed).toMatchObject({ message: 'import finished', reason: 'The feed URL answered 404.' });
      expect(matches(filter.FilterPattern, failed)).toBe(true);
      expect(matches(filter.FilterPattern, importEndLine({ status: 'failed' }))).toBe(true);
      expect(matches(filter.FilterPattern, importEndLine({ status: 'succeeded' }))).toBe(false);
      expect(matches(filter.FilterPattern, { level: 'warn', message: 'request', status: 'failed' })).toBe(
        false,
      );
      // Nor another warning about an import.
      expect(
        matches(filter.FilterPattern, {
          level: 'warn',
          message: 'lease lost',
          importId: 'imp-1',
          status: 'failed',
        }),
      ).toBe(false);

      const alarm = alarmNamed(dev.api, 'vps-dev-imports-failing');
      notifiesTopic(alarm, 'vps-dev-imports-failing');
      expect(queryOf(alarm, 'm1')).toEqual({
        namespace: 'vps-dev',
        metricName: 'FailedImports',
        stat: 'Sum',
        period: 3600,
        dimensions: undefined,
      });
      expect([alarm.Threshold, alarm.ComparisonOperator, alarm.EvaluationPeriods]).toEqual([
        10,
        'GreaterThanOrEqualToThreshold',
        1,
      ]);
    },
  );

  it('subscribes the configured e-mail address', () => {
    const stack = new Stack(new App(), 'AlarmsTest', {
      env: { account: '111111111111', region: 'eu-west-1' },
    });
    new AlarmTopic(stack, 'Alarms', {
      prefix: 'vps-test',
      email: 'ops@example.com',
      removalPolicy: RemovalPolicy.DESTROY,
    });
    Template.fromStack(stack).hasResourceProperties('AWS::SNS::Subscription', {
      Protocol: 'email',
      Endpoint: 'ops@example.com',
    });
  });
});

describe('dashboard', () => {
  it("draws the stage's key metrics on one dashboard", () => {
    const dashboards = Object.values(resources(dev.api, 'AWS::CloudWatch::Dashboard'));
    expect(dashboards).toHaveLength(1);
    expect(dashboards[0]!.Properties!.DashboardName).toBe('vps-dev');
    const body = JSON.parse(placeholder(dashboards[0]!.Properties!.DashboardBody)) as {
      widgets: { properties: { metrics?: unknown[][] } }[];
    };
    // Each metric as `namespace name dimension values… stat`, functions by their logical id.
    const drawn = body.widgets.flatMap((widget) =>
      (widget.properties.metrics ?? []).map((metric) => {
        const options = metric.at(-1) as { stat?: string };
        return `${metric.slice(0, -1).join(' ')} ${options.stat ?? ''}`;
      }),
    );
    const has = (fragment: string) =>
      expect(
        drawn.some((metric) => metric.includes(fragment)),
        fragment,
      ).toBe(true);
    for (const api of ['vps-dev-public', 'vps-dev-admin'])
      for (const name of ['Count', '4XXError', '5XXError']) has(`AWS/ApiGateway ${name} ApiName ${api} Sum`);
    has('AWS/ApiGateway Latency ApiName vps-dev-public Stage token p50');
    has('AWS/ApiGateway Latency ApiName vps-dev-public Stage token p99');
    const names = [
      ...ROUTES.map((route) => route.name),
      'Authorizer',
      ...(WORKER_EXISTS ? ['ImportWorker'] : []),
    ];
    const lambdaMetrics = drawn.filter((metric) => metric.startsWith('AWS/Lambda'));
    // (Function names are tokens in the body: one of each per function.)
    for (const [metric, stat] of [
      ['Errors', 'Sum'],
      ['Throttles', 'Sum'],
      ['Duration', 'p99'],
    ])
      expect(
        lambdaMetrics.filter((m) => m === `AWS/Lambda ${metric} FunctionName token ${stat}`),
        metric,
      ).toHaveLength(names.length);
    has('AWS/SQS ApproximateNumberOfMessagesVisible QueueName vps-dev-imports Maximum');
    has('AWS/SQS ApproximateAgeOfOldestMessage QueueName vps-dev-imports Maximum');
    has('AWS/SQS ApproximateNumberOfMessagesVisible QueueName vps-dev-imports-dlq Maximum');
    if (WORKER_EXISTS) has('vps-dev FailedImports Sum');
    for (const metric of ['ClusterStatus.red', 'JVMMemoryPressure', 'CPUUtilization'])
      has(`AWS/ES ${metric} ClientId 111111111111 DomainName vps-dev-search Maximum`);
    has('AWS/ES FreeStorageSpace ClientId 111111111111 DomainName vps-dev-search Minimum');
  });
});

describe('least privilege', () => {
  const WRITES = [
    'dynamodb:PutItem',
    'dynamodb:UpdateItem',
    'dynamodb:DeleteItem',
    'dynamodb:BatchWriteItem',
  ];

  it('lets public functions read keys, feeds and products and count usage, but write nothing else', () => {
    for (const route of PUBLIC) {
      const statements = statementsOf(dev.api, functionId(dev.api, `vps-dev-${route.name}`));
      const feeds = actionsOn(statements, 'FeedsTable');
      expect(feeds.has('dynamodb:GetItem'), route.name).toBe(true);
      for (const write of WRITES) expect(feeds.has(write), `${route.name} ${write} feeds`).toBe(false);
      for (const table of ['ProductsTable', 'ImportsTable']) {
        for (const write of WRITES)
          expect(actionsOn(statements, table).has(write), `${route.name} ${write} ${table}`).toBe(false);
      }
      // Keys by id: get and update only (no listing a feed's keys, no Put or Delete); usage counters: the
      // same and a Query by key (a search id's recent rate-limit buckets)
      expect([...actionsOn(statements, 'KeysTable')].sort(), `${route.name} KeysTable`).toEqual([
        'dynamodb:GetItem',
        'dynamodb:UpdateItem',
      ]);
      expect([...actionsOn(statements, 'UsageTable')].sort(), `${route.name} UsageTable`).toEqual([
        'dynamodb:GetItem',
        'dynamodb:Query',
        'dynamodb:UpdateItem',
      ]);
      // The Query on the rate-limit partitions only, not on a feed's usage rows (search ids, contexts).
      const queries = statements.filter(
        (statement) =>
          actionsOf(statement).includes('dynamodb:Query') &&
          JSON.stringify(statement.Resource).includes('UsageTable'),
      );
      expect(
        queries.map((statement) => [actionsOf(statement), statement.Condition]),
        route.name,
      ).toEqual([
        [['dynamodb:Query'], { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['rate#*'] } }],
      ]);
      const all = statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action]));
      expect(
        all.filter(
          (a) =>
            a.startsWith('apigateway:') ||
            a === 's3:PutObject' ||
            a === 's3:AbortMultipartUpload' ||
            a === 's3:DeleteObject' ||
            a === 'es:ESHttpPut' ||
            a === 'es:ESHttpDelete',
        ),
      ).toEqual([]);
      // Geometric verification reads the catalogue's stored local features, and nothing else of the bucket.
      expect([...actionsOn(statements, '/features/*')], route.name).toEqual(['s3:GetObject']);
      expect(actionsOn(statements, '/imports/*').size, route.name).toBe(0);
    }
  });

  it('lets the import worker write local features and the feed deletion remove everything it stored', () => {
    const writes = ['s3:AbortMultipartUpload', 's3:DeleteObject', 's3:GetObject', 's3:PutObject'];
    const names = ['vps-dev-AdminDeleteFeed', ...(WORKER_EXISTS ? ['vps-dev-ImportWorker'] : [])];
    for (const name of names) {
      const statements = statementsOf(dev.api, functionId(dev.api, name));
      for (const prefix of ['/features/*', '/imports/*'])
        expect([...actionsOn(statements, prefix)].sort(), `${name} ${prefix}`).toEqual(writes);
    }
    // The worker finishes the deletions a DELETE hands over (lib/ingest/feed-jobs.ts): the same tables.
    for (const name of names) {
      const deletion = statementsOf(dev.api, functionId(dev.api, name));
      for (const table of ['FeedsTable', 'ImportsTable', 'UsageTable', 'ProductsTable', 'KeysTable'])
        expect(actionsOn(deletion, table).has('dynamodb:DeleteItem'), `${name} ${table}`).toBe(true);
    }
  });

  it.runIf(WORKER_EXISTS)("lets the import worker remove a deleted feed's gateway API keys", () => {
    const worker = statementsOf(dev.api, functionId(dev.api, 'vps-dev-ImportWorker'));
    expect([...actionsOn(worker, ':apigateway:')].sort()).toEqual([
      'apigateway:DELETE',
      'apigateway:GET',
      'apigateway:POST',
    ]);
    expect(
      resources(dev.api)[functionId(dev.api, 'vps-dev-ImportWorker')]!.Properties!.Environment,
    ).toMatchObject({
      Variables: {
        USAGE_PLAN_FREE_ID: expect.anything(),
        USAGE_PLAN_PRO_ID: expect.anything(),
        USAGE_PLAN_ENTERPRISE_ID: expect.anything(),
      },
    });
  });

  it('lets only the key-managing admin functions call the API Gateway key APIs', () => {
    for (const route of ROUTES) {
      const statements = statementsOf(dev.api, functionId(dev.api, `vps-dev-${route.name}`));
      const gateway = actionsOn(statements, ':apigateway:');
      expect(gateway.size > 0, route.name).toBe(Boolean(ROUTE_ACCESS[route.name]?.apiKeyRegistry));
      if (gateway.size > 0)
        expect([...gateway].sort()).toEqual(['apigateway:DELETE', 'apigateway:GET', 'apigateway:POST']);
    }
  });

  it('tells the key-managing functions the Free, Pro and Enterprise plans and lets them move keys among them', () => {
    const planIds = Object.fromEntries(
      Object.entries(resources(dev.api, 'AWS::ApiGateway::UsagePlan')).map(([id, plan]) => [
        plan.Properties!.UsagePlanName,
        id,
      ]),
    ) as Record<string, string>;
    const names = [
      ...ROUTES.filter((route) => ROUTE_ACCESS[route.name]?.apiKeyRegistry).map(
        (route) => `vps-dev-${route.name}`,
      ),
      ...(WORKER_EXISTS ? ['vps-dev-ImportWorker'] : []),
    ];
    expect(names.length).toBeGreaterThan(1);
    for (const name of names) {
      const fnId = functionId(dev.api, name);
      const env = (
        resources(dev.api)[fnId]!.Properties!.Environment as { Variables: Record<string, unknown> }
      ).Variables;
      const statements = statementsOf(dev.api, fnId);
      for (const [plan, key] of [
        ['Free', 'USAGE_PLAN_FREE_ID'],
        ['Pro', 'USAGE_PLAN_PRO_ID'],
        ['Enterprise', 'USAGE_PLAN_ENTERPRISE_ID'],
      ] as const) {
        expect(env[key], `${name} ${key}`).toEqual({ Ref: planIds[plan] });
        // Create and delete usage plan keys of that plan (POST /usageplans/{id}/keys, DELETE .../keys/*).
        expect([...actionsOn(statements, `"${planIds[plan]}"`)].sort(), `${name} ${plan}`).toEqual([
          'apigateway:DELETE',
          'apigateway:POST',
        ]);
      }
      // Never the Shared plan: its one key is the stack's.
      expect(actionsOn(statements, `"${planIds.Shared}"`).size, name).toBe(0);
    }
  });

  it('grants Scan to the feeds listing alone, and no table action that no adapter calls', () => {
    const names = [
      ...ROUTES.map((route) => `vps-dev-${route.name}`),
      ...(WORKER_EXISTS ? ['vps-dev-ImportWorker'] : []),
    ];
    for (const name of names) {
      const statements = statementsOf(dev.api, functionId(dev.api, name));
      const actions = new Set(statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action])));
      expect(actions.has('dynamodb:Scan'), name).toBe(name === 'vps-dev-AdminListFeeds');
      for (const unused of ['dynamodb:DescribeTable', 'dynamodb:ConditionCheckItem'])
        expect(actions.has(unused), `${name} ${unused}`).toBe(false);
    }
  });

  it('lets the import start record an import and store its files, but read or list nothing of them', () => {
    const statements = statementsOf(dev.api, functionId(dev.api, 'vps-dev-AdminStartImport'));
    expect([...actionsOn(statements, 'ImportsTable')].sort()).toEqual([
      'dynamodb:DeleteItem',
      'dynamodb:PutItem',
    ]);
    expect([...actionsOn(statements, '/imports/*')].sort()).toEqual(['s3:DeleteObject', 's3:PutObject']);
    const all = new Set(statements.flatMap(actionsOf));
    for (const action of ['s3:GetObject', 's3:ListBucket', 's3:AbortMultipartUpload'])
      expect(all.has(action), action).toBe(false);
  });

  it('grants table indexes only with Query (the item actions by key cannot use them)', () => {
    const names = [
      ...ROUTES.map((route) => `vps-dev-${route.name}`),
      ...(WORKER_EXISTS ? ['vps-dev-ImportWorker'] : []),
    ];
    let indexGrants = 0;
    for (const name of names) {
      for (const statement of statementsOf(dev.api, functionId(dev.api, name))) {
        const list = Array.isArray(statement.Resource) ? statement.Resource : [statement.Resource];
        if (!list.some((resource) => JSON.stringify(resource).includes('/index/'))) continue;
        indexGrants += 1;
        expect(actionsOf(statement), name).toContain('dynamodb:Query');
      }
      // Public functions touch keys and usage by key only: no index of those tables.
      if (PUBLIC.some((route) => name === `vps-dev-${route.name}`)) {
        const statements = statementsOf(dev.api, functionId(dev.api, name));
        for (const table of ['KeysTable', 'UsageTable']) {
          const onIndexes = statements.filter(
            (statement) =>
              JSON.stringify(statement.Resource).includes(table) &&
              JSON.stringify(statement.Resource).includes('/index/'),
          );
          expect(onIndexes, `${name} ${table}`).toEqual([]);
        }
      }
    }
    expect(indexGrants).toBeGreaterThan(0);
  });

  it('lets public functions POST only to the OpenSearch endpoints the adapters call', () => {
    for (const route of PUBLIC) {
      const statements = statementsOf(dev.api, functionId(dev.api, `vps-dev-${route.name}`));
      const endpoints = statements
        .filter((statement) => actionsOf(statement).includes('es:ESHttpPost'))
        .flatMap((statement) =>
          Array.isArray(statement.Resource) ? statement.Resource : [statement.Resource],
        )
        .map((resource) => placeholder(resource).split('/').pop());
      expect(endpoints.sort(), route.name).toEqual(['_count', '_msearch', '_search']);
    }
  });

  it('names table indexes exactly instead of index/*', () => {
    expect(JSON.stringify(dev.api.toJSON())).not.toContain('/index/*');
  });

  it('grants no domain-wide OpenSearch _bulk (it would reach every index)', () => {
    expect(JSON.stringify(dev.api.toJSON())).not.toMatch(/:domain\/[^/"]+\/_bulk/);
  });
});

describe('environment', () => {
  const envOf = (name: string) =>
    (
      resources(dev.api)[functionId(dev.api, name)]!.Properties!.Environment as {
        Variables: Record<string, unknown>;
      }
    ).Variables;

  it('classifies every configuration key', () => {
    for (const key of CONFIG_ENV_KEYS) expect(ENV_SCOPE, key).toHaveProperty(key);
  });

  it('sets every key the configuration needs on every function, and no local-only key', () => {
    const names = [
      ...ROUTES.map((route) => `vps-dev-${route.name}`),
      ...(WORKER_EXISTS ? ['vps-dev-ImportWorker'] : []),
    ];
    for (const name of names) {
      const env = envOf(name);
      for (const key of keysOfScope('every')) expect(env, `${name} ${key}`).toHaveProperty(key);
      for (const key of keysOfScope('local', 'runtime'))
        expect(env, `${name} ${key}`).not.toHaveProperty(key);
      for (const key of keysOfScope('worker'))
        expect(Object.hasOwn(env, key), `${name} ${key}`).toBe(name === 'vps-dev-ImportWorker');
      expect(env).toMatchObject({
        VECTOR_INDEX: 'opensearch',
        OPENSEARCH_SIGV4: 'true',
        MODEL_DIR: '/opt/models',
        STAGE: 'dev',
      });
    }
  });

  it('sets no variable that lib/config.ts does not read (no dead configuration such as REST_API_ID)', () => {
    const read = new Set<string>([...CONFIG_ENV_KEYS, 'NODE_OPTIONS']);
    for (const [id, fn] of Object.entries(resources(dev.api, 'AWS::Lambda::Function'))) {
      const env = (fn.Properties!.Environment as { Variables: Record<string, unknown> } | undefined)
        ?.Variables;
      for (const key of Object.keys(env ?? {})) expect(read.has(key), `${id} ${key}`).toBe(true);
    }
  });

  it('sets the registry keys exactly on the functions that manage keys', () => {
    const names = [
      ...ROUTES.map((route) => `vps-dev-${route.name}`),
      ...(WORKER_EXISTS ? ['vps-dev-ImportWorker'] : []),
    ];
    const managing = (name: string) =>
      name === 'vps-dev-ImportWorker' ||
      ROUTES.some((route) => name === `vps-dev-${route.name}` && ROUTE_ACCESS[route.name]?.apiKeyRegistry);
    expect(keysOfScope('registry').sort()).toEqual([
      'USAGE_PLAN_ENTERPRISE_ID',
      'USAGE_PLAN_FREE_ID',
      'USAGE_PLAN_PRO_ID',
    ]);
    for (const name of names) {
      const env = envOf(name);
      for (const key of keysOfScope('registry'))
        expect(Object.hasOwn(env, key), `${name} ${key}`).toBe(managing(name));
    }
  });

  it('configures each function so that lib/config.ts parses it for AWS', () => {
    for (const route of ROUTES) {
      const env = Object.fromEntries(
        Object.entries(envOf(`vps-dev-${route.name}`)).map(([k, v]) => [k, placeholder(v)]),
      );
      const config = loadConfig({ ...env, AWS_REGION: 'eu-west-1' });
      expect(config.vectorIndex.kind, route.name).toBe('opensearch');
      expect(config.modelDir).toBe('/opt/models');
      expect(config.apiKeyRegistry.kind, route.name).toBe(
        ROUTE_ACCESS[route.name]?.apiKeyRegistry ? 'apigateway' : 'none',
      );
      expect(config.tables.feeds).not.toBe('vps-feeds');
    }
  });
});

describe('layers', () => {
  const layerIds = (name: string) =>
    JSON.stringify(resources(dev.api)[functionId(dev.api, name)]!.Properties!.Layers ?? []);
  const modelLayer = () =>
    Object.entries(resources(dev.api, 'AWS::Lambda::LayerVersion')).find(
      ([, l]) => l.Properties?.LayerName === 'vps-dev-models',
    )!;

  it('attaches the model layer to the functions that run the models, and the native layer to all', () => {
    const [modelId] = modelLayer();
    const [nativeId] = Object.entries(resources(dev.api, 'AWS::Lambda::LayerVersion')).find(
      ([, l]) => l.Properties?.LayerName === 'vps-dev-native-modules',
    )!;
    for (const route of ROUTES) {
      const layers = layerIds(`vps-dev-${route.name}`);
      expect(layers.includes(modelId), route.name).toBe(Boolean(ROUTE_ACCESS[route.name]?.models));
      expect(layers.includes(nativeId), route.name).toBe(true);
    }
  });

  it('ships the built models under models/ so the layer mounts them at /opt/models', () => {
    const [, layer] = modelLayer();
    const assetPath = (layer.Metadata as Record<string, string>)['aws:asset:path'];
    const files = readdirSync(join(dev.assemblyDir, assetPath!, 'models'));
    expect(files.some((file) => file.endsWith('.onnx'))).toBe(true);
    expect(files.some((file) => file.endsWith('.manifest.json'))).toBe(true);
    // Both learned projections: the catalogue's and the regional windows'
    for (const spec of [PROJECTION_SPEC, WINDOW_PROJECTION_SPEC])
      expect(files).toEqual(expect.arrayContaining([spec.file, `${spec.name}.manifest.json`]));
  });
});
