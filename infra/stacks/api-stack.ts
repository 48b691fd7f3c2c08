import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Annotations, CfnOutput, Duration, Size, Stack, type StackProps, Validations } from 'aws-cdk-lib';
import * as apigateway from 'aws-cdk-lib/aws-apigateway';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import type { ErrorCode } from '#lib/domain/errors.ts';
import { authenticationChallenge, STATUS_OF } from '#lib/http/errors.ts';
import { COMPRESSION_MIN_BYTES } from '#lib/http/compression.ts';
import {
  ALLOWED_REQUEST_HEADERS,
  EXPOSED_HEADERS,
  PREFLIGHT_MAX_AGE_SECONDS,
  PREFLIGHT_METHODS,
} from '#lib/http/cors.ts';
import { ROUTES, type Route } from '#lib/http/routes.ts';
import {
  bindApiKeyRegistry,
  bindBucket,
  bindSearchDomain,
  bindTable,
  searchDomainEnvironment,
  TABLE_ENV,
  type TableName,
  bindTriggerQueue,
} from '../constructs/bindings.ts';
import { ALARM_PERIOD, type AlarmTopic, errorRate } from '../constructs/alarms.ts';
import { ServiceDashboard } from '../constructs/dashboard.ts';
import { type CodeMode, EndpointFunction, REPO_ROOT } from '../constructs/endpoint-function.ts';
import { ModelLayer, NativeModulesLayer } from '../constructs/layers.ts';
import { MODEL_DIR } from '../function-environment.ts';
import { accessOf, type AccessProfile, IMPORT_WORKER_PROFILE } from '../route-access.ts';
import { type PlanLimits, resourcePrefix, type Stage, type StageConfig } from '../stages.ts';
import { resolveTuning, TUNING_CONTEXT_KEY } from '../tuning.ts';
import type { StatefulStack } from './stateful-stack.ts';

/** The import worker's handler module (functions/import-worker.ts, export `handler`). */
export const IMPORT_WORKER_ENTRY = 'functions/import-worker.ts';

/** `public-api-5xx` and the public functions' `-errors`: this share of requests, with this many at least. */
export const PUBLIC_5XX = { percent: 5, minErrors: 5 };
/** `public-api-latency`: the stage's p99 over this, in periods with this many requests at least. */
export const PUBLIC_LATENCY = { p99Ms: 5000, minRequests: 20 };
/**
 * `imports-failing`: this many failed imports in an hour. A shop's own mistake (a feed URL that answers 404,
 * a file with no usable row) fails its import too, and the shop sees why in the admin API: one failure
 * is not the operator's, and an alarm on each would page for customers' errors. What is the operator's
 * is many at once (the search domain or the bucket failing every import after its retries).
 */
export const FAILED_IMPORTS_PER_HOUR = 10;
/** The failed imports counted from the worker's log: a metric of the stage's namespace, `vps-<stage>`. */
export const FAILED_IMPORTS_METRIC = 'FailedImports';

const F = apigateway.AccessLogField;
/**
 * The gateway's access line: API Gateway's standard fields, and what they leave out that an operator
 * needs — the key (the search-id authorizer's principalId, `sid-…`, as the functions' lines name it; the
 * usage-plan key's id, never the key), the IAM caller of an admin request (its ARN), the latencies, the
 * integration's status and error, the gateway's own error and its type (a throttle, a refused key, a
 * timeout), the authorizer's outcome, the X-Ray trace id. The client's IP is kept, as in the standard
 * fields, for the stage's log retention (docs/deploy.md "Logs").
 */
const ACCESS_LOG_FORMAT = apigateway.AccessLogFormat.custom(
  JSON.stringify({
    requestId: F.contextRequestId(),
    extendedRequestId: F.contextExtendedRequestId(),
    ip: F.contextIdentitySourceIp(),
    caller: F.contextIdentityCaller(),
    user: F.contextIdentityUser(),
    userArn: F.contextIdentityUserArn(),
    requestTime: F.contextRequestTime(),
    httpMethod: F.contextHttpMethod(),
    resourcePath: F.contextResourcePath(),
    status: F.contextStatus(),
    protocol: F.contextProtocol(),
    responseLength: F.contextResponseLength(),
    responseLatency: F.contextResponseLatency(),
    principalId: F.contextAuthorizerPrincipalId(),
    apiKeyId: F.contextIdentityApiKeyId(),
    authorizerStatus: F.contextAuthorizerStatus(),
    authorizerLatency: F.contextAuthorizerLatency(),
    authorizerError: F.contextAuthorizerError(),
    integrationStatus: F.contextIntegrationStatus(),
    integrationLatency: F.contextIntegrationLatency(),
    integrationError: F.contextIntegrationErrorMessage(),
    errorMessage: F.contextErrorMessage(),
    errorType: F.contextErrorResponseType(),
    xrayTraceId: F.contextXrayTraceId(),
  }),
);

export interface ApiStackProps extends StackProps {
  stage: Stage;
  config: StageConfig;
  stateful: StatefulStack;
  /** `esbuild` for synth/deploy; `inline` stubs for assertion tests. */
  codeMode: CodeMode;
  /** `staged` copies the native modules into the layer; `stub` leaves it empty (assertion tests). */
  nativeLayer: 'staged' | 'stub';
  /** Route table (default: lib/http/routes.ts). */
  routes?: readonly Route[];
  /** Directory of the built models (default: layers/models/build). */
  modelDir?: string;
  /** Handler module of the import worker (default: functions/import-worker.ts); skipped while it does not exist. */
  importWorkerEntry?: string;
}

/**
 * The request path: two REST APIs with a stage named after the environment, one Lambda function per route
 * of lib/http/routes.ts, the search-id authorizer, the usage plans, the model and native-module layers and
 * the import worker.
 *
 * - Public API (`/api/v1/*`, `POST /`): apiKeySource AUTHORIZER; every method requires an API key, which
 *   the authorizer supplies (the Bearer search id, or the shared key when the id is in the body). Usage
 *   plans Free, Pro and Enterprise meter search ids sent in the header (by their feed's plan); Shared
 *   meters body-authenticated requests.
 * - Admin API (`/admin/v1/*`): AWS_IAM on every method (SigV4-signed operator calls). A separate API because
 *   its functions need the public usage plan ids, and a plan depends on its stage's deployment, which
 *   depends on every method of that API: admin functions inside the public API would form a cycle.
 */
export class ApiStack extends Stack {
  readonly publicApi: apigateway.RestApi;
  readonly adminApi: apigateway.RestApi;
  readonly plans: {
    free: apigateway.UsagePlan;
    pro: apigateway.UsagePlan;
    enterprise: apigateway.UsagePlan;
    shared: apigateway.UsagePlan;
  };
  readonly functions = new Map<string, lambda.Function>();
  readonly authorizerFunction: lambda.Function;
  readonly importWorker: lambda.Function | undefined;
  /** Failed imports per period (from the worker's log); undefined without the worker. */
  readonly failedImports: cloudwatch.Metric | undefined;
  readonly modelLayer: lambda.ILayerVersion;
  readonly nativeLayer: lambda.ILayerVersion;

  constructor(scope: Construct, id: string, props: ApiStackProps) {
    super(scope, id, props);
    const { stage, config, stateful, codeMode } = props;
    const prefix = resourcePrefix(stage);
    const routes = props.routes ?? ROUTES;

    this.modelLayer = new ModelLayer(this, 'ModelLayer', {
      layerVersionName: `${prefix}-models`,
      removalPolicy: config.removalPolicy,
      ...(props.modelDir ? { modelDir: props.modelDir } : {}),
    }).layer;
    this.nativeLayer = new NativeModulesLayer(this, 'NativeModulesLayer', {
      layerVersionName: `${prefix}-native-modules`,
      removalPolicy: config.removalPolicy,
      mode: props.nativeLayer,
    }).layer;

    // The stage's tuning of `default`-scope settings (and --context tuning), checked by the config's own
    // parser: a bad value fails the synth here rather than every cold start.
    const tuning = resolveTuning(config.tuning, this.node.tryGetContext(TUNING_CONTEXT_KEY));

    // Everything the container reads at cold start: it builds every store, so every function is told
    // where every resource is (binders below add the grants). The registry is off unless bound.
    const baseEnvironment: Record<string, string> = {
      ...tuning,
      STAGE: stage,
      LOG_LEVEL: config.logLevel,
      ...Object.fromEntries(
        (Object.keys(TABLE_ENV) as TableName[]).map((name) => [
          TABLE_ENV[name],
          stateful.tables[name].table.tableName,
        ]),
      ),
      ASSETS_BUCKET: stateful.bucket.bucketName,
      ...searchDomainEnvironment(this.searchDomain(stateful)),
      MODEL_DIR,
      API_KEY_REGISTRY: 'none',
      // Imports run in the worker (S3 event → SQS), never inside an API request.
      IMPORT_RUNNER: 'worker',
      PLAN_LIMIT_FREE: String(config.hourlyLimits.free),
      PLAN_LIMIT_PRO: String(config.hourlyLimits.pro),
      PLAN_LIMIT_ENTERPRISE: String(config.hourlyLimits.enterprise),
    };

    const endpoint = (
      name: string,
      entry: string,
      handler: string,
      description: string,
      kind: 'public' | 'admin' | 'worker',
    ) => {
      if (!existsSync(join(REPO_ROOT, entry))) {
        throw new Error(
          `Route ${name}: handler module ${entry} does not exist (lib/http/routes.ts names it).`,
        );
      }
      return new EndpointFunction(this, name, {
        functionName: `${prefix}-${name}`,
        entry,
        handler,
        description,
        memorySize: config.memory[kind],
        timeout: config.timeout[kind],
        logRetention: config.logRetention,
        removalPolicy: config.removalPolicy,
        environment: { ...baseEnvironment },
        layers: [this.nativeLayer],
        codeMode,
      }).fn;
    };

    // One CloudWatch role for API Gateway execution logs (an account-wide setting, declared once).
    const apiLogsRole = new iam.Role(this, 'ApiGatewayLogsRole', {
      assumedBy: new iam.ServicePrincipal('apigateway.amazonaws.com'),
      managedPolicies: [
        iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AmazonAPIGatewayPushToCloudWatchLogs'),
      ],
    });
    Validations.of(apiLogsRole).acknowledge({
      id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]',
      reason:
        'AmazonAPIGatewayPushToCloudWatchLogs is the AWS-maintained policy API Gateway needs to write execution logs.',
    });
    const apiAccount = new apigateway.CfnAccount(this, 'ApiGatewayAccount', {
      cloudWatchRoleArn: apiLogsRole.roleArn,
    });

    // ---- Public API -------------------------------------------------------------------------------
    this.publicApi = this.restApi('PublicApi', `${prefix}-public`, stage, config, apiAccount, {
      apiKeySourceType: apigateway.ApiKeySourceType.AUTHORIZER,
      description:
        'Visual product search: public endpoints (search id in Authorization: Bearer or the body).',
      // Browser clients send Authorization and JSON (and maybe tracing headers: ALLOWED_REQUEST_HEADERS):
      // the preflight is answered by the gateway (as the local server answers it); each feed's domain
      // allow-list is enforced by the handlers.
      defaultCorsPreflightOptions: {
        allowOrigins: apigateway.Cors.ALL_ORIGINS,
        allowMethods: PREFLIGHT_METHODS,
        allowHeaders: ALLOWED_REQUEST_HEADERS,
        maxAge: Duration.seconds(PREFLIGHT_MAX_AGE_SECONDS),
      },
    });
    // The gateway's own 5xx (a handler that failed or timed out, the authorizer down) count here; a 503
    // the handlers answer for a dependency that is down too. A share of the requests, not a count: a count
    // high enough to stay quiet at busy hours (10 of 10,000 is noise) misses a total outage at night, and
    // one low enough for the night pages on noise by day. Five 5xx at least (errorRate), so a lone one at
    // 3 a.m. does not page; a steady share under 5% shows on the dashboard without paging.
    stateful.alarms.alarm(this, 'public-api-5xx', {
      alarmDescription: `The public API answered 5xx to ${PUBLIC_5XX.percent}% of its requests or more in 5 minutes (${PUBLIC_5XX.minErrors} 5xx at least).`,
      metric: errorRate(
        this.publicApi.metricServerError({ period: ALARM_PERIOD, statistic: 'Sum' }),
        this.publicApi.metricCount({ period: ALARM_PERIOD, statistic: 'Sum' }),
        PUBLIC_5XX.minErrors,
        '5xx, % of requests',
      ),
      threshold: PUBLIC_5XX.percent,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    });
    // Slow searches: the stage's p99 (the gateway's whole answer time, authorizer and handler included)
    // over PUBLIC_LATENCY.p99Ms for three periods in a row, far above a warm search (~0.3 s) and a cold
    // start (~2 s), far below the 29 s timeout (whose 504s the 5xx alarm counts). A period with fewer than
    // minRequests requests counts as fast: its p99 is its one slowest request (a slow image host).
    const publicStage = this.publicApi.deploymentStage;
    stateful.alarms.alarm(this, 'public-api-latency', {
      alarmDescription: `The public API's p99 latency was over ${PUBLIC_LATENCY.p99Ms / 1000} s for 15 minutes (5-minute periods with ${PUBLIC_LATENCY.minRequests} requests or more).`,
      metric: new cloudwatch.MathExpression({
        expression: `IF(requests >= ${PUBLIC_LATENCY.minRequests}, latency, 0)`,
        usingMetrics: {
          latency: publicStage.metricLatency({ statistic: 'p99' }),
          requests: publicStage.metricCount({ statistic: 'Sum' }),
        },
        period: ALARM_PERIOD,
        label: 'p99 latency (ms)',
      }),
      threshold: PUBLIC_LATENCY.p99Ms,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 3,
    });
    addErrorResponses(this.publicApi, 'public');

    const sharedKeyValue = `${prefix}-shared-body-auth-requests`;
    this.authorizerFunction = new EndpointFunction(this, 'Authorizer', {
      functionName: `${prefix}-Authorizer`,
      entry: 'functions/authorizer.ts',
      handler: 'handler',
      description: 'Gateway REQUEST authorizer: reports the Bearer search id as the usage identifier key',
      memorySize: 256,
      timeout: Duration.seconds(5),
      logRetention: config.logRetention,
      removalPolicy: config.removalPolicy,
      environment: { STAGE: stage, LOG_LEVEL: config.logLevel, GATEWAY_SHARED_KEY: sharedKeyValue },
      codeMode,
    }).fn;
    // No identity source and no caching: API Gateway would refuse (401) a request without the identity
    // source before calling the authorizer, and requests with the search id in the body have none.
    const authorizer = new apigateway.RequestAuthorizer(this, 'SearchIdAuthorizer', {
      authorizerName: `${prefix}-search-id`,
      handler: this.authorizerFunction,
      identitySources: [],
      resultsCacheTtl: Duration.seconds(0),
    });
    (authorizer.node.defaultChild as apigateway.CfnAuthorizer).addPropertyDeletionOverride('IdentitySource');

    const plan = (id: 'Free' | 'Pro' | 'Enterprise' | 'Shared', limits: PlanLimits, description: string) =>
      this.publicApi.addUsagePlan(`${id}Plan`, {
        name: id,
        description,
        throttle: { rateLimit: limits.rateLimit, burstLimit: limits.burstLimit },
        ...(limits.dailyQuota ? { quota: { limit: limits.dailyQuota, period: apigateway.Period.DAY } } : {}),
        apiStages: [{ api: this.publicApi, stage: this.publicApi.deploymentStage }],
      });
    this.plans = {
      free: plan('Free', config.plans.free, 'Search ids of free feeds (Authorization: Bearer).'),
      pro: plan('Pro', config.plans.pro, 'Search ids of pro feeds (Authorization: Bearer).'),
      // No daily quota: an enterprise feed's own hourly limit (application) is its only volume limit.
      enterprise: plan(
        'Enterprise',
        config.plans.enterprise,
        'Search ids of enterprise feeds (Authorization: Bearer); no daily quota.',
      ),
      shared: plan(
        'Shared',
        config.plans.shared,
        'Requests with the search id in the body (one shared key).',
      ),
    };
    const sharedKey = new apigateway.ApiKey(this, 'SharedBodyAuthKey', {
      apiKeyName: `${prefix}-shared-body-auth`,
      description:
        'Reported by the authorizer for requests without Authorization: Bearer (search id in the body).',
      value: sharedKeyValue,
      enabled: true,
    });
    this.plans.shared.addApiKey(sharedKey);

    // ---- Admin API --------------------------------------------------------------------------------
    this.adminApi = this.restApi('AdminApi', `${prefix}-admin`, stage, config, apiAccount, {
      description: 'Visual product search: admin API (IAM, SigV4).',
      defaultMethodOptions: { authorizationType: apigateway.AuthorizationType.IAM },
    });
    addErrorResponses(this.adminApi, 'admin');
    // The admin API's 5xx: imports that cannot start, feeds that cannot be deleted (an operator or the
    // dashboard sees each one, so a few already matter). A count, not a share as for the public API: its
    // traffic is a few operator calls, where a share would swing on one request, and dashboard polling
    // would dilute the few calls that failed.
    stateful.alarms.alarm(this, 'admin-api-5xx', {
      alarmDescription: 'The admin API answered 5xx more than 3 times in 5 minutes.',
      metric: this.adminApi.metricServerError({ period: ALARM_PERIOD, statistic: 'Sum' }),
      threshold: 3,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    });

    // ---- One function per route -------------------------------------------------------------------
    for (const route of routes) {
      const fn = endpoint(
        route.name,
        route.entry,
        route.handler,
        `${route.method} ${route.path}`,
        route.access,
      );
      const { profile, reviewed } = accessOf(route);
      if (!reviewed) {
        Annotations.of(fn).addWarningV2(
          'vps:route-access-default',
          `Route ${route.name} has no entry in infra/route-access.ts: it got the default ${route.access} profile.`,
        );
      }
      this.applyProfile(fn, profile, stateful);
      this.functions.set(route.name, fn);

      const api = route.access === 'public' ? this.publicApi : this.adminApi;
      const resource = route.path === '/' ? api.root : api.root.resourceForPath(route.path);
      const integration = new apigateway.LambdaIntegration(fn, { allowTestInvoke: false });
      const options =
        route.access === 'public'
          ? { authorizer, authorizationType: apigateway.AuthorizationType.CUSTOM, apiKeyRequired: true }
          : { authorizationType: apigateway.AuthorizationType.IAM };
      resource.addMethod(route.method, integration, options);
      // HEAD is GET without the body (RFC 9110): the gateway does not answer it with a GET method, so the
      // same function gets a HEAD method of its own (the middleware drops the body).
      if (route.method === 'GET') resource.addMethod('HEAD', integration, options);
    }

    // CORS preflights are mock integrations: no backend, nothing to authorise.
    for (const construct of this.publicApi.root.node.findAll()) {
      if (construct instanceof apigateway.Method && construct.httpMethod === 'OPTIONS') {
        Validations.of(construct).acknowledge({
          id: 'AwsSolutions-APIG4',
          reason:
            'CORS preflight (OPTIONS) answered by a mock integration: it reaches no function and returns no data.',
        });
      }
    }

    // ---- Import worker (S3 imports/ → SQS → Lambda) -------------------------------------------------
    const workerEntry = props.importWorkerEntry ?? IMPORT_WORKER_ENTRY;
    if (existsSync(join(REPO_ROOT, workerEntry))) {
      const worker = endpoint(
        'ImportWorker',
        workerEntry,
        'handler',
        'Feed import worker (SQS ← S3 imports/)',
        'worker',
      );
      this.applyProfile(worker, IMPORT_WORKER_PROFILE, stateful);
      worker.addEventSource(
        new SqsEventSource(stateful.importQueue, { batchSize: 1, reportBatchItemFailures: true }),
      );
      bindTriggerQueue(worker, stateful.importQueue);
      this.importWorker = worker;
    } else {
      // The worker is written separately; until its module exists the queue collects import events.
      Annotations.of(this).addWarningV2(
        'vps:import-worker-missing',
        `${workerEntry} does not exist yet: the import worker function is not created (the queue still receives S3 events).`,
      );
      this.importWorker = undefined;
    }

    // ---- Function alarms ----------------------------------------------------------------------------
    for (const route of routes)
      this.functionAlarms(stateful.alarms, route.name, this.functions.get(route.name)!, route.access);
    this.functionAlarms(stateful.alarms, 'Authorizer', this.authorizerFunction, 'public');
    if (this.importWorker) {
      this.functionAlarms(stateful.alarms, 'ImportWorker', this.importWorker, 'worker');
      this.failedImports = this.countFailedImports(this.importWorker, prefix);
      stateful.alarms.alarm(this, 'imports-failing', {
        alarmDescription: `${FAILED_IMPORTS_PER_HOUR} imports or more failed in an hour: more than shops' own feed errors (see docs/deploy.md "Alarms").`,
        metric: this.failedImports.with({ period: Duration.hours(1), statistic: 'Sum' }),
        threshold: FAILED_IMPORTS_PER_HOUR,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      });
    }

    new ServiceDashboard(this, 'Dashboard', {
      prefix,
      publicApi: this.publicApi,
      adminApi: this.adminApi,
      functions: new Map<string, lambda.IFunction>([
        ...this.functions,
        ['Authorizer', this.authorizerFunction],
        ...(this.importWorker ? [['ImportWorker', this.importWorker] as const] : []),
      ]),
      importQueueName: stateful.importQueueName,
      importDeadLetterQueueName: stateful.importDeadLetterQueueName,
      searchDomainName: stateful.domainName,
      failedImports: this.failedImports,
    });

    new CfnOutput(this, 'PublicApiUrl', { value: this.publicApi.url });
    new CfnOutput(this, 'AdminApiUrl', { value: this.adminApi.url });
  }

  /**
   * A function's own alarms, `<name>-errors` and `<name>-throttles` (which function fails, beside the APIs'
   * 5xx). Lambda's Errors are what a handler did not answer: a crash, a timeout, memory run out, a failed
   * cold start (a handler's own 5xx is an answer, not an error). Throttles are invocations Lambda refused:
   * no function reserves concurrency, so a throttle means the account's concurrency ran out.
   * - public (and the authorizer): errors as a share of invocations (PUBLIC_5XX, as the API's 5xx); one
   *   throttle is a request refused with a 5xx.
   * - admin: 3 errors in 5 minutes (a few operator calls: a share would swing on one); one throttle.
   * - worker: 2 errors in an hour (each is a run killed part way; SQS retries it, and the dead-letter
   *   alarm follows the third failure: one after a deploy or a huge feed is expected, a repeat is not);
   *   throttles in 3 periods in a row (SQS retries a throttled poll: only a lasting one delays imports).
   */
  private functionAlarms(
    alarms: AlarmTopic,
    name: string,
    fn: lambda.Function,
    kind: 'public' | 'admin' | 'worker',
  ): void {
    const sum = { period: ALARM_PERIOD, statistic: 'Sum' };
    const atLeast = (threshold: number) => ({
      threshold,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    });
    const errors =
      kind === 'public'
        ? {
            alarmDescription: `${fn.functionName} failed (crash, timeout, memory) ${PUBLIC_5XX.percent}% of its invocations or more in 5 minutes (${PUBLIC_5XX.minErrors} at least).`,
            metric: errorRate(
              fn.metricErrors(sum),
              fn.metricInvocations(sum),
              PUBLIC_5XX.minErrors,
              'errors, %',
            ),
            ...atLeast(PUBLIC_5XX.percent),
          }
        : kind === 'admin'
          ? {
              alarmDescription: `${fn.functionName} failed (crash, timeout, memory) 3 times or more in 5 minutes.`,
              metric: fn.metricErrors(sum),
              ...atLeast(3),
            }
          : {
              alarmDescription: `${fn.functionName} failed (crash, timeout, memory) twice or more in an hour.`,
              metric: fn.metricErrors({ period: Duration.hours(1), statistic: 'Sum' }),
              ...atLeast(2),
            };
    alarms.alarm(this, `${name}-errors`, errors);
    alarms.alarm(this, `${name}-throttles`, {
      alarmDescription:
        kind === 'worker'
          ? `${fn.functionName} was throttled in each of 3 periods of 5 minutes: imports wait.`
          : `${fn.functionName} was throttled: requests were refused (the account's concurrency ran out).`,
      metric: fn.metricThrottles(sum),
      ...atLeast(1),
      evaluationPeriods: kind === 'worker' ? 3 : 1,
    });
  }

  /**
   * The failed imports, counted from the worker's log: its `import finished` line is at warn with status
   * `failed` (lib/ingest/feed-jobs.ts logImportEnd; its reason is the `reason` field, lib/log.ts keeps
   * the line's own message). 0 for each batch of other lines, so the metric shows quiet hours as 0, not
   * as gaps.
   */
  private countFailedImports(worker: lambda.Function, prefix: string): cloudwatch.Metric {
    const filter = new logs.MetricFilter(this, 'FailedImportsFilter', {
      logGroup: worker.logGroup,
      filterPattern: logs.FilterPattern.all(
        logs.FilterPattern.stringValue('$.level', '=', 'warn'),
        logs.FilterPattern.stringValue('$.status', '=', 'failed'),
        logs.FilterPattern.stringValue('$.message', '=', 'import finished'),
      ),
      metricNamespace: prefix,
      metricName: FAILED_IMPORTS_METRIC,
      metricValue: '1',
      defaultValue: 0,
    });
    return filter.metric({ statistic: 'Sum', label: 'failed imports' });
  }

  private searchDomain(stateful: StatefulStack) {
    return { domainName: stateful.domainName, domainEndpoint: stateful.domain.domainEndpoint };
  }

  private restApi(
    id: string,
    name: string,
    stage: Stage,
    config: StageConfig,
    account: apigateway.CfnAccount,
    props: Partial<apigateway.RestApiProps>,
  ): apigateway.RestApi {
    const accessLogs = new logs.LogGroup(this, `${id}AccessLogs`, {
      retention: config.logRetention,
      removalPolicy: config.removalPolicy,
    });
    const api = new apigateway.RestApi(this, id, {
      restApiName: name,
      endpointTypes: [apigateway.EndpointType.REGIONAL],
      cloudWatchRole: false,
      // Answers from 1 KB are compressed for clients that accept it (as the local server does).
      minCompressionSize: Size.bytes(COMPRESSION_MIN_BYTES),
      deployOptions: {
        stageName: stage,
        throttlingRateLimit: config.stageThrottle.rateLimit,
        throttlingBurstLimit: config.stageThrottle.burstLimit,
        loggingLevel: apigateway.MethodLoggingLevel.INFO,
        dataTraceEnabled: false,
        metricsEnabled: true,
        tracingEnabled: true,
        accessLogDestination: new apigateway.LogGroupLogDestination(accessLogs),
        accessLogFormat: ACCESS_LOG_FORMAT,
      },
      ...props,
    });
    api.deploymentStage.node.addDependency(account);
    // The execution logs (INFO, several lines a request) go to a group API Gateway creates on the first
    // request, without retention: kept for ever. Declared here under that name, with the stage's
    // retention, before the stage can log (observability audit).
    const executionLogs = new logs.LogGroup(this, `${id}ExecutionLogs`, {
      logGroupName: `API-Gateway-Execution-Logs_${api.restApiId}/${stage}`,
      retention: config.logRetention,
      removalPolicy: config.removalPolicy,
    });
    api.deploymentStage.node.addDependency(executionLogs);
    Validations.of(api).acknowledge({
      id: 'AwsSolutions-APIG3',
      reason:
        "No WAF yet: abuse is bounded by usage-plan throttles, the stage throttle and the application's per-search-id hourly limit; a WebACL is an operator add-on.",
    });
    Validations.of(api).acknowledge({
      id: 'AwsSolutions-APIG2',
      reason:
        "Requests are validated in the handlers (zod), which answer with the service's one error shape (DESIGN §3); a gateway validator would answer in another shape.",
    });
    Validations.of(api).acknowledge({
      id: 'AwsSolutions-COG4',
      reason:
        'No Cognito users: public methods authenticate search ids (Lambda authorizer + API keys), admin methods use IAM (SigV4).',
    });
    return api;
  }

  private applyProfile(fn: lambda.Function, profile: AccessProfile, stateful: StatefulStack): void {
    for (const [name, access] of Object.entries(profile.tables) as [
      TableName,
      NonNullable<AccessProfile['tables'][TableName]>,
    ][]) {
      bindTable(fn, stateful.tables[name], access);
    }
    for (const { access, prefix } of profile.buckets ?? [])
      bindBucket(fn, { bucket: stateful.bucket, name: stateful.bucketName }, access, prefix);
    if (profile.search) bindSearchDomain(fn, this.searchDomain(stateful), profile.search);
    if (profile.apiKeyRegistry) {
      const { free, pro, enterprise } = this.plans;
      bindApiKeyRegistry(fn, { plans: { free, pro, enterprise } });
    }
    if (profile.models) fn.addLayers(this.modelLayer);
  }
}

/**
 * Gateway-generated errors in the service's error shape (DESIGN §3), with the status of the code from the
 * one mapping (lib/http/errors.ts), and the X-Request-Id header the handlers' answers carry (the same id:
 * the handlers take the gateway's request id, lib/http/middleware.ts), so a client can quote it for a
 * refusal too. The other 4xx the gateway makes (a SigV4 signature that is wrong or expired, an authorizer's
 * Unauthorized) keep the gateway's status and message, with the request id and the CORS headers added.
 */
function addErrorResponses(api: apigateway.RestApi, kind: 'public' | 'admin'): void {
  const responses: [string, apigateway.ResponseType, ErrorCode, string, Record<string, string>?][] = [
    [
      'InvalidApiKey',
      apigateway.ResponseType.INVALID_API_KEY,
      'invalid_search_id',
      'Unknown search id.',
      // (As the handlers' 401s: lib/http/errors.ts authenticationChallenge.)
      { 'WWW-Authenticate': `'${authenticationChallenge('invalid_search_id', false)}'` },
    ],
    [
      'Throttled',
      apigateway.ResponseType.THROTTLED,
      'rate_limited',
      'Too many requests; slow down.',
      { 'Retry-After': "'1'" },
    ],
    [
      'QuotaExceeded',
      apigateway.ResponseType.QUOTA_EXCEEDED,
      'rate_limited',
      'The daily quota of this search id is spent.',
    ],
    [
      'AccessDenied',
      apigateway.ResponseType.ACCESS_DENIED,
      'unauthorized',
      'The caller is not allowed to call this endpoint.',
    ],
    // Unknown paths (and, on the IAM-protected admin API, unsigned requests: the gateway cannot tell them apart).
    kind === 'public'
      ? [
          'MissingAuth',
          apigateway.ResponseType.MISSING_AUTHENTICATION_TOKEN,
          'not_found',
          'No such endpoint.',
        ]
      : [
          'MissingAuth',
          apigateway.ResponseType.MISSING_AUTHENTICATION_TOKEN,
          'unauthorized',
          'Sign admin requests with SigV4 (or the path does not exist).',
        ],
    ['TooLarge', apigateway.ResponseType.REQUEST_TOO_LARGE, 'payload_too_large', 'Request body too large.'],
    [
      'Default5xx',
      apigateway.ResponseType.DEFAULT_5XX,
      'unavailable',
      'The service is unavailable. Retry later.',
    ],
  ];
  // Browsers read gateway errors of the public API only with an allow-origin header, and their headers
  // (a throttled 429's Retry-After) only when exposed, as the handlers' answers expose them.
  const cors: Record<string, string> =
    kind === 'public'
      ? { 'Access-Control-Allow-Origin': "'*'", 'Access-Control-Expose-Headers': `'${EXPOSED_HEADERS}'` }
      : {};
  // A mapping from the request context (unquoted), not a literal. Not tried in a deployment: AWS documents
  // request parameters and literals for gateway-response headers (docs/deploy.md "Public API").
  const common = { ...cors, 'X-Request-Id': 'context.requestId' };
  for (const [id, type, code, message, headers] of responses) {
    const status = STATUS_OF[code];
    api.addGatewayResponse(id, {
      type,
      statusCode: String(status),
      templates: {
        'application/json': JSON.stringify({
          error: { status, code, message, details: [] },
          requestId: '$context.requestId',
        }),
      },
      responseHeaders: { ...common, ...headers },
    });
  }
  // No status: each keeps its own (401, 403, 415...), which one code of the service's shape could not
  // follow. The body is the gateway's default message, with the request id beside it.
  api.addGatewayResponse('Default4xx', {
    type: apigateway.ResponseType.DEFAULT_4XX,
    templates: {
      'application/json': '{"message":$context.error.messageString,"requestId":"$context.requestId"}',
    },
    responseHeaders: common,
  });
}
