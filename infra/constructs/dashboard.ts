/**
 * The stage's CloudWatch dashboard (`<prefix>`): one page with what the alarms watch and what explains
 * them. Requests, 4xx/5xx and latency of the public API, the admin API's, every function's errors,
 * throttles and p99 duration, the import queue, its dead letters, failed imports, and the search domain.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import type * as apigateway from 'aws-cdk-lib/aws-apigateway';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { Construct } from 'constructs';
import { ALARM_PERIOD } from './alarms.ts';

export interface ServiceDashboardProps {
  /** Resource name prefix of the stage (`vps-<stage>`): the dashboard's name. */
  prefix: string;
  publicApi: apigateway.RestApi;
  adminApi: apigateway.RestApi;
  /** Every function by its short name (routes, `Authorizer`, `ImportWorker`). */
  functions: ReadonlyMap<string, lambda.IFunction>;
  /** Literal names: the metrics name them without importing values from the stateful stack. */
  importQueueName: string;
  importDeadLetterQueueName: string;
  searchDomainName: string;
  /** Failed imports per period (the worker's log); none without the worker. */
  failedImports: cloudwatch.Metric | undefined;
}

export class ServiceDashboard extends Construct {
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: ServiceDashboardProps) {
    super(scope, id);
    const period = ALARM_PERIOD;
    const sum = { period, statistic: 'Sum' };
    const api = (restApi: apigateway.RestApi, title: string) =>
      new cloudwatch.GraphWidget({
        title,
        width: 8,
        left: [
          restApi.metricCount({ ...sum, label: 'requests' }),
          restApi.metricClientError({ ...sum, label: '4xx' }),
          restApi.metricServerError({ ...sum, label: '5xx' }),
        ],
      });
    const publicStage = props.publicApi.deploymentStage;
    const perFunction = (title: string, metric: (fn: lambda.IFunction, name: string) => cloudwatch.IMetric) =>
      new cloudwatch.GraphWidget({
        title,
        width: 8,
        height: 8,
        left: [...props.functions].map(([name, fn]) => metric(fn, name)),
        legendPosition: cloudwatch.LegendPosition.RIGHT,
      });
    const queue = (queueName: string, metricName: string, statistic: string, label: string) =>
      new cloudwatch.Metric({
        namespace: 'AWS/SQS',
        metricName,
        dimensionsMap: { QueueName: queueName },
        period,
        statistic,
        label,
      });
    const account = Stack.of(this).account;
    const search = (metricName: string, statistic: string, label: string) =>
      new cloudwatch.Metric({
        namespace: 'AWS/ES',
        metricName,
        dimensionsMap: { DomainName: props.searchDomainName, ClientId: account },
        period: Duration.minutes(1),
        statistic,
        label,
      });

    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: props.prefix,
      defaultInterval: Duration.hours(24),
      widgets: [
        [
          api(props.publicApi, 'Public API: requests, 4xx, 5xx (per 5 min)'),
          new cloudwatch.GraphWidget({
            title: 'Public API: latency (ms)',
            width: 8,
            left: [
              publicStage.metricLatency({ period, statistic: 'p50', label: 'p50' }),
              publicStage.metricLatency({ period, statistic: 'p99', label: 'p99' }),
            ],
          }),
          api(props.adminApi, 'Admin API: requests, 4xx, 5xx (per 5 min)'),
        ],
        [
          perFunction('Functions: errors (crash, timeout, memory)', (fn, name) =>
            fn.metricErrors({ ...sum, label: name }),
          ),
          perFunction('Functions: throttles', (fn, name) => fn.metricThrottles({ ...sum, label: name })),
          perFunction('Functions: duration p99 (ms)', (fn, name) =>
            fn.metricDuration({ period, statistic: 'p99', label: name }),
          ),
        ],
        [
          new cloudwatch.GraphWidget({
            title: 'Import queue',
            width: 8,
            left: [queue(props.importQueueName, 'ApproximateNumberOfMessagesVisible', 'Maximum', 'waiting')],
            right: [queue(props.importQueueName, 'ApproximateAgeOfOldestMessage', 'Maximum', 'oldest (s)')],
          }),
          new cloudwatch.GraphWidget({
            title: 'Import dead letters',
            width: 8,
            left: [
              queue(
                props.importDeadLetterQueueName,
                'ApproximateNumberOfMessagesVisible',
                'Maximum',
                'dead letters',
              ),
            ],
          }),
          new cloudwatch.GraphWidget({
            title: 'Failed imports (per hour)',
            width: 8,
            left: props.failedImports
              ? [props.failedImports.with({ period: Duration.hours(1), statistic: 'Sum' })]
              : [],
          }),
        ],
        [
          new cloudwatch.GraphWidget({
            title: 'Search domain: health',
            width: 6,
            left: [
              search('ClusterStatus.red', 'Maximum', 'red'),
              search('ClusterStatus.yellow', 'Maximum', 'yellow'),
              search('ClusterIndexWritesBlocked', 'Maximum', 'writes blocked'),
            ],
          }),
          new cloudwatch.GraphWidget({
            title: 'Search domain: JVM memory pressure (%)',
            width: 6,
            left: [search('JVMMemoryPressure', 'Maximum', 'JVM memory pressure')],
          }),
          new cloudwatch.GraphWidget({
            title: 'Search domain: CPU (%)',
            width: 6,
            left: [search('CPUUtilization', 'Maximum', 'CPU')],
          }),
          new cloudwatch.GraphWidget({
            title: 'Search domain: free storage (MiB, fullest node)',
            width: 6,
            left: [search('FreeStorageSpace', 'Minimum', 'free storage')],
          }),
        ],
      ],
    });
  }
}
