/**
 * Per-stage settings of the CDK app: one typed record, so a stage cannot miss a setting. Accounts and
 * regions are fixed here (placeholders until the operator fills them in) so that `cdk synth` needs no
 * credentials and no context lookups.
 */
import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import { RetentionDays } from 'aws-cdk-lib/aws-logs';
import type { Tuning } from './tuning.ts';

export type Stage = 'dev' | 'prod';
export const STAGES: readonly Stage[] = ['dev', 'prod'];

/** Gateway-side limits of one usage plan (per API key). The application's hourly limit stays authoritative. */
export interface PlanLimits {
  /** Steady-state requests per second. */
  rateLimit: number;
  /** Burst bucket size. */
  burstLimit: number;
  /** Requests per day; undefined = no daily quota. */
  dailyQuota: number | undefined;
}

export interface StageConfig {
  /** AWS account and region this stage deploys to (no lookups at synth time). */
  env: { account: string; region: string };
  /**
   * Usage plans: Free, Pro and Enterprise for search ids sent in the header (by their feed's plan), Shared
   * for requests authenticated in the body. Enterprise has no daily quota: an enterprise feed's hourly limit
   * is its own (PLAN_LIMIT_ENTERPRISE or the feed's hourlyLimit), enforced by the application alone.
   */
  plans: {
    free: PlanLimits;
    pro: PlanLimits;
    enterprise: PlanLimits & { dailyQuota: undefined };
    shared: PlanLimits;
  };
  /** Rolling-hour limits enforced by the application (PLAN_LIMIT_*). */
  hourlyLimits: { free: number; pro: number; enterprise: number };
  /** Stage-wide gateway throttle (all keys together). */
  stageThrottle: { rateLimit: number; burstLimit: number };
  /** Memory (MB) of the public (model) functions, the admin functions and the import worker. */
  memory: { public: number; admin: number; worker: number };
  timeout: { public: Duration; admin: Duration; worker: Duration };
  logRetention: RetentionDays;
  logLevel: 'debug' | 'info' | 'warn' | 'error';
  openSearch: {
    instanceType: string;
    instanceCount: number;
    /** Dedicated master nodes (undefined = none). */
    masterInstanceType: string | undefined;
    masterCount: number;
    volumeGiB: number;
    /** Spread data nodes over this many availability zones (1 = no zone awareness). */
    availabilityZones: 1 | 2 | 3;
  };
  /** RETAIN keeps data when a stack is deleted (prod); DESTROY lets dev stacks be torn down. */
  removalPolicy: RemovalPolicy;
  /**
   * E-mail address the stage's alarms notify (infra/constructs/alarms.ts; the address confirms the
   * subscription once). Undefined: the alarms still fire, visible in the CloudWatch console.
   */
  alarmEmail: string | undefined;
  /**
   * Settings the stack otherwise leaves at the config's default (scope `default` in
   * infra/function-environment.ts: search tuning, limits, caches, EMBEDDING_PROJECTION), as environment
   * strings, set on every route function and the import worker. Checked at synth by lib/config.ts's own
   * parser (infra/tuning.ts); `--context tuning='{"KEY":"value"}'` overrides them key by key.
   */
  tuning: Tuning;
}

export const STAGE_CONFIG: Record<Stage, StageConfig> = {
  dev: {
    env: { account: '111111111111', region: 'eu-west-1' },
    plans: {
      free: { rateLimit: 5, burstLimit: 10, dailyQuota: 2_600 },
      pro: { rateLimit: 20, burstLimit: 40, dailyQuota: 24_000 },
      enterprise: { rateLimit: 50, burstLimit: 100, dailyQuota: undefined },
      shared: { rateLimit: 50, burstLimit: 100, dailyQuota: undefined },
    },
    hourlyLimits: { free: 100, pro: 1000, enterprise: 10_000 },
    stageThrottle: { rateLimit: 100, burstLimit: 200 },
    memory: { public: 2048, admin: 512, worker: 3008 },
    timeout: { public: Duration.seconds(29), admin: Duration.seconds(29), worker: Duration.minutes(15) },
    logRetention: RetentionDays.ONE_WEEK,
    logLevel: 'debug',
    openSearch: {
      instanceType: 't3.medium.search',
      instanceCount: 1,
      masterInstanceType: undefined,
      masterCount: 0,
      volumeGiB: 20,
      availabilityZones: 1,
    },
    removalPolicy: RemovalPolicy.DESTROY,
    alarmEmail: undefined,
    tuning: {},
  },
  prod: {
    env: { account: '222222222222', region: 'eu-west-1' },
    plans: {
      free: { rateLimit: 5, burstLimit: 10, dailyQuota: 2_600 },
      pro: { rateLimit: 50, burstLimit: 100, dailyQuota: 24_000 },
      enterprise: { rateLimit: 100, burstLimit: 200, dailyQuota: undefined },
      shared: { rateLimit: 200, burstLimit: 400, dailyQuota: undefined },
    },
    hourlyLimits: { free: 100, pro: 1000, enterprise: 10_000 },
    stageThrottle: { rateLimit: 1000, burstLimit: 2000 },
    memory: { public: 3008, admin: 1024, worker: 3008 },
    timeout: { public: Duration.seconds(29), admin: Duration.seconds(29), worker: Duration.minutes(15) },
    logRetention: RetentionDays.THREE_MONTHS,
    logLevel: 'info',
    openSearch: {
      instanceType: 'r6g.large.search',
      instanceCount: 3,
      masterInstanceType: 'm6g.large.search',
      masterCount: 3,
      volumeGiB: 100,
      availabilityZones: 3,
    },
    removalPolicy: RemovalPolicy.RETAIN,
    alarmEmail: undefined,
    tuning: {},
  },
};

export function isStage(value: unknown): value is Stage {
  return typeof value === 'string' && (STAGES as readonly string[]).includes(value);
}

/** Resource names start with this, e.g. `vps-dev-feeds`. */
export function resourcePrefix(stage: Stage): string {
  return `vps-${stage}`;
}
