import { Duration, RemovalPolicy, Stack, type StackProps, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { TABLES } from '#lib/adapters/dynamodb-tables.ts';
import { FEATURES_ROOT } from '#lib/adapters/object-store-feature-store.ts';
import { ALARM_PERIOD, AlarmTopic } from '../constructs/alarms.ts';
import type { BoundTable, TableName } from '../constructs/bindings.ts';
import { resourcePrefix, type Stage, type StageConfig } from '../stages.ts';

/** S3 key prefix under which feed files for import are written; the import queue is notified of them. */
export const IMPORTS_PREFIX = 'imports/';
/** S3 key prefix of the catalogue's stored local features (written by imports, read by search). */
export const FEATURES_PREFIX = FEATURES_ROOT;
/** Suffix of the marker object whose creation starts an import (lib/domain/catalogue/imports.ts). */
export const IMPORT_REQUEST_SUFFIX = '/request.json';

/**
 * The domain's `indices.query.bool.max_clause_count` (default 1024). A visual-word query is one Lucene
 * clause per word, up to 8 × 1,000 query keypoints (lib/adapters/opensearch-visual-word-index.ts explains
 * why the limit is raised rather than the query split or cut); an infra test checks this covers the
 * adapter's VISUAL_WORD_MAX_QUERY_TERMS plus its filter clauses, with headroom.
 */
export const SEARCH_MAX_CLAUSE_COUNT = 10_240;

export interface StatefulStackProps extends StackProps {
  stage: Stage;
  config: StageConfig;
}

/**
 * Everything that holds data: the DynamoDB tables (declared from lib/adapters/dynamodb-tables.ts, as the
 * local runtime creates them), the assets bucket (feed files, images), the import queue fed by the bucket's
 * events, and the OpenSearch k-NN domain. RETAIN in prod, DESTROY in dev.
 */
export class StatefulStack extends Stack {
  readonly tables: Record<TableName, BoundTable>;
  readonly bucket: s3.Bucket;
  /** Literal names (fixed per stage), so grants in other stacks need no cross-stack wildcard tokens. */
  readonly bucketName: string;
  readonly domainName: string;
  readonly importQueue: sqs.Queue;
  /**
   * The import queue's and its dead-letter queue's names, literal (the dashboard's metrics name them
   * without importing values from this stack).
   */
  readonly importQueueName: string;
  readonly importDeadLetterQueueName: string;
  readonly domain: opensearch.Domain;
  /** The stage's alarm topic; the API stack adds its own alarms to it. */
  readonly alarms: AlarmTopic;

  constructor(scope: Construct, id: string, props: StatefulStackProps) {
    super(scope, id, props);
    const { stage, config } = props;
    const prefix = resourcePrefix(stage);
    const removalPolicy = config.removalPolicy;

    const tables = {} as Record<TableName, BoundTable>;
    for (const definition of TABLES) {
      const table = new dynamodb.Table(this, `${capitalise(definition.configKey)}Table`, {
        tableName: `${prefix}-${definition.configKey}`,
        partitionKey: { name: definition.partitionKey, type: dynamodb.AttributeType.STRING },
        ...(definition.sortKey
          ? { sortKey: { name: definition.sortKey, type: dynamodb.AttributeType.STRING } }
          : {}),
        billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
        encryption: dynamodb.TableEncryption.AWS_MANAGED,
        pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
        deletionProtection: removalPolicy === RemovalPolicy.RETAIN,
        ...(definition.ttlAttribute ? { timeToLiveAttribute: definition.ttlAttribute } : {}),
        removalPolicy,
      });
      for (const index of definition.indexes) {
        table.addGlobalSecondaryIndex({
          indexName: index.name,
          partitionKey: { name: index.partitionKey, type: dynamodb.AttributeType.STRING },
          ...(index.sortKey ? { sortKey: { name: index.sortKey, type: dynamodb.AttributeType.STRING } } : {}),
          projectionType: dynamodb.ProjectionType.ALL,
        });
      }
      tables[definition.configKey] = { table, definition };
    }
    this.tables = tables;

    const accessLogs = new s3.Bucket(this, 'AccessLogsBucket', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
      lifecycleRules: [{ expiration: Duration.days(365) }],
      removalPolicy,
    });
    Validations.of(accessLogs).acknowledge({
      id: 'AwsSolutions-S1',
      reason: 'This is the server access log bucket of the assets bucket; logging it into itself would loop.',
    });

    this.importQueueName = `${prefix}-imports`;
    this.importDeadLetterQueueName = `${prefix}-imports-dlq`;
    const importDlq = new sqs.Queue(this, 'ImportDeadLetterQueue', {
      queueName: this.importDeadLetterQueueName,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(14),
      removalPolicy,
    });
    Validations.of(importDlq).acknowledge({
      id: 'AwsSolutions-SQS3',
      reason: 'This queue is the dead-letter queue of the import queue.',
    });
    this.importQueue = new sqs.Queue(this, 'ImportQueue', {
      queueName: this.importQueueName,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // Six times the worker's timeout, as Lambda recommends for SQS event sources.
      visibilityTimeout: Duration.seconds(config.timeout.worker.toSeconds() * 6),
      deadLetterQueue: { queue: importDlq, maxReceiveCount: 3 },
      removalPolicy,
    });

    // A fixed name lets the queue policy name the bucket without a dependency cycle (the bucket's
    // notification configuration needs the policy first). Account and region keep it globally unique.
    const bucketName = `${prefix}-assets-${this.account}-${this.region}`;
    this.bucketName = bucketName;
    // Added to the queue's own policy (which already denies non-TLS access): a second QueuePolicy on the
    // same queue would replace it.
    const { policyDependable: queuePolicy } = this.importQueue.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'S3ImportNotifications',
        principals: [new iam.ServicePrincipal('s3.amazonaws.com')],
        actions: ['sqs:SendMessage'],
        resources: [this.importQueue.queueArn],
        conditions: {
          ArnEquals: { 'aws:SourceArn': `arn:${this.partition}:s3:::${bucketName}` },
          StringEquals: { 'aws:SourceAccount': this.account },
        },
      }),
    );

    this.bucket = new s3.Bucket(this, 'AssetsBucket', {
      bucketName,
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      versioned: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: 'assets/',
      lifecycleRules: [
        // A feed file upload stopped part way (size cap, timeout) is aborted by the worker; one whose abort
        // failed (or whose worker died) would otherwise keep its parts, billed and invisible, for ever.
        {
          noncurrentVersionExpiration: Duration.days(30),
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
        { prefix: IMPORTS_PREFIX, expiration: Duration.days(30) },
      ],
      removalPolicy,
    });
    // S3 → SQS notification declared on the bucket itself (the CDK helper would add a custom-resource Lambda).
    const cfnBucket = this.bucket.node.defaultChild as s3.CfnBucket;
    cfnBucket.notificationConfiguration = {
      queueConfigurations: [
        {
          event: 's3:ObjectCreated:*',
          queue: this.importQueue.queueArn,
          // Only the request marker (imports/{feedId}/{importId}/request.json) starts an import.
          filter: {
            s3Key: {
              rules: [
                { name: 'prefix', value: IMPORTS_PREFIX },
                { name: 'suffix', value: IMPORT_REQUEST_SUFFIX },
              ],
            },
          },
        },
      ],
    };
    cfnBucket.node.addDependency(queuePolicy!);

    this.domainName = `${prefix}-search`;
    this.domain = this.createDomain(stage, config, removalPolicy);

    this.alarms = new AlarmTopic(this, 'Alarms', { prefix, email: config.alarmEmail, removalPolicy });
    const atLeastOne = {
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    };
    // An import or a handed-over feed deletion the worker failed three times: it waits here for an
    // operator (a deletion keeps its feed hidden until then).
    this.alarms.alarm(this, 'import-dead-letters', {
      alarmDescription: `Imports or feed deletions in ${importDlq.queueName} failed three times; see docs/deploy.md "Alarms".`,
      metric: importDlq.metricApproximateNumberOfMessagesVisible({
        period: ALARM_PERIOD,
        statistic: 'Maximum',
      }),
      ...atLeastOne,
    });
    // Triggers wait at most ~32 minutes between attempts (2, then 30), and one waiting for a busy feed is
    // sent again as a new message each minute: an hour-old one means the worker is not taking them.
    this.alarms.alarm(this, 'import-queue-stalled', {
      alarmDescription: `The oldest message in ${this.importQueue.queueName} is over an hour old: imports are not being run.`,
      metric: this.importQueue.metricApproximateAgeOfOldestMessage({
        period: ALARM_PERIOD,
        statistic: 'Maximum',
      }),
      threshold: 3600,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    });
    this.alarms.alarm(this, 'search-cluster-red', {
      alarmDescription: 'A primary shard of the search domain is unassigned: searches and imports fail.',
      metric: this.domain.metricClusterStatusRed({ period: Duration.minutes(1), statistic: 'Maximum' }),
      ...atLeastOne,
    });
    this.alarms.alarm(this, 'search-writes-blocked', {
      alarmDescription: 'The search domain refuses writes (disk or memory pressure): imports fail.',
      metric: this.domain.metricClusterIndexWritesBlocked({ period: ALARM_PERIOD, statistic: 'Maximum' }),
      ...atLeastOne,
    });
    this.alarms.alarm(this, 'search-storage-low', {
      alarmDescription: 'A search data node has less than a fifth of its volume free.',
      // FreeStorageSpace is in megabytes, per node (the minimum is the fullest node).
      metric: this.domain.metricFreeStorageSpace({ period: ALARM_PERIOD, statistic: 'Minimum' }),
      threshold: config.openSearch.volumeGiB * 1024 * 0.2,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
    });
    // The two AWS recommends beside those ("Recommended CloudWatch alarms for Amazon OpenSearch Service"),
    // with its thresholds. The heap of the fullest data node: near out-of-memory errors (the service also
    // blocks writes after 30 minutes over 92%).
    this.alarms.alarm(this, 'search-jvm-pressure', {
      alarmDescription:
        'A search data node used 95% of its JVM heap or more for 3 minutes: out-of-memory errors are near; scale the domain.',
      metric: this.domain.metricJVMMemoryPressure({ period: Duration.minutes(1), statistic: 'Maximum' }),
      threshold: 95,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 3,
    });
    // Short peaks to 100% are normal (an import's bulk writes); 45 minutes at 80% is a domain too small.
    this.alarms.alarm(this, 'search-cpu-high', {
      alarmDescription:
        'A search data node ran at 80% CPU or more for 45 minutes: searches slow down; scale the domain.',
      metric: this.domain.metricCPUUtilization({ period: Duration.minutes(15), statistic: 'Maximum' }),
      threshold: 80,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 3,
    });
  }

  private createDomain(stage: Stage, config: StageConfig, removalPolicy: RemovalPolicy): opensearch.Domain {
    const os = config.openSearch;
    const domainName = this.domainName;
    const logGroup = (name: string) =>
      new logs.LogGroup(this, `Search${name}Logs`, {
        logGroupName: `/aws/opensearch/${domainName}/${name.toLowerCase()}`,
        retention: config.logRetention,
        removalPolicy,
      });
    const slowSearch = logGroup('SlowSearch');
    const slowIndex = logGroup('SlowIndex');
    const app = logGroup('Application');

    const domain = new opensearch.Domain(this, 'SearchDomain', {
      domainName,
      // OpenSearch 2.x: k-NN (HNSW via Lucene/Faiss, efficient filtering) ships with the engine.
      version: opensearch.EngineVersion.OPENSEARCH_2_19,
      capacity: {
        dataNodeInstanceType: os.instanceType,
        dataNodes: os.instanceCount,
        ...(os.masterInstanceType
          ? { masterNodeInstanceType: os.masterInstanceType, masterNodes: os.masterCount }
          : {}),
        multiAzWithStandbyEnabled: false,
      },
      ebs: { volumeSize: os.volumeGiB, volumeType: ec2.EbsDeviceVolumeType.GP3 },
      zoneAwareness:
        os.availabilityZones > 1
          ? { enabled: true, availabilityZoneCount: os.availabilityZones }
          : { enabled: false },
      encryptionAtRest: { enabled: true },
      nodeToNodeEncryption: true,
      enforceHttps: true,
      tlsSecurityPolicy: opensearch.TLSSecurityPolicy.TLS_1_2,
      logging: {
        slowSearchLogEnabled: true,
        slowSearchLogGroup: slowSearch,
        slowIndexLogEnabled: true,
        slowIndexLogGroup: slowIndex,
        appLogEnabled: true,
        appLogGroup: app,
      },
      // The log resource policy is declared below (the CDK default adds a custom-resource Lambda).
      suppressLogsResourcePolicy: true,
      // A cluster setting the service exposes only as an advanced option. Changing advanced options of an
      // existing domain runs a blue/green deployment (no data loss, a slower deploy).
      advancedOptions: { 'indices.query.bool.max_clause_count': String(SEARCH_MAX_CLAUSE_COUNT) },
      removalPolicy,
    });

    const logsPolicy = new logs.CfnResourcePolicy(this, 'SearchLogsPolicy', {
      policyName: `${domainName}-logs`,
      policyDocument: JSON.stringify({
        Version: '2012-10-17',
        Statement: [
          {
            Effect: 'Allow',
            Principal: { Service: 'es.amazonaws.com' },
            Action: ['logs:PutLogEvents', 'logs:CreateLogStream'],
            Resource: [slowSearch, slowIndex, app].map((group) => `${group.logGroupArn}`),
          },
        ],
      }),
    });

    // The domain validates at creation that it may write to its log groups.
    domain.node.addDependency(logsPolicy);

    // Least-privilege resource policy: only IAM principals of this account, and only through their own
    // identity policies (the API stack grants each function the paths and verbs it needs). No anonymous
    // access; the domain ARN is spelled out to avoid a self-reference.
    const cfnDomain = domain.node.defaultChild as opensearch.CfnDomain;
    cfnDomain.accessPolicies = {
      Version: '2012-10-17',
      Statement: [
        {
          Effect: 'Allow',
          Principal: { AWS: `arn:${this.partition}:iam::${this.account}:root` },
          Action: ['es:ESHttpGet', 'es:ESHttpHead', 'es:ESHttpPost', 'es:ESHttpPut', 'es:ESHttpDelete'],
          Resource: `arn:${this.partition}:es:${this.region}:${this.account}:domain/${domainName}/*`,
        },
      ],
    };

    Validations.of(domain).acknowledge({
      id: 'AwsSolutions-OS1',
      reason:
        'Public endpoint with SigV4: every request is signed and authorised by IAM (resource policy limited to this account, identity policies per function); keeping the functions out of a VPC avoids NAT cost and cold-start overhead.',
    });
    Validations.of(domain).acknowledge({
      id: 'AwsSolutions-OS3',
      reason:
        'Callers are Lambda functions without fixed IP addresses; access is restricted by IAM (SigV4) instead of an IP allow list.',
    });
    Validations.of(domain).acknowledge({
      id: 'AwsSolutions-OS5',
      reason:
        'The access policy allows only IAM principals of this account (no anonymous access); requests must be SigV4-signed.',
    });
    if (!os.masterInstanceType) {
      Validations.of(domain).acknowledge({
        id: 'AwsSolutions-OS4',
        reason: `Stage ${stage} runs a single small data node to save cost; prod uses dedicated master nodes.`,
      });
    }
    if (os.availabilityZones === 1) {
      Validations.of(domain).acknowledge({
        id: 'AwsSolutions-OS7',
        reason: `Stage ${stage} runs a single node, so zone awareness does not apply; prod spreads nodes over three zones.`,
      });
    }
    return domain;
  }
}

function capitalise(value: string): string {
  return value.charAt(0).toUpperCase() + value.slice(1);
}
