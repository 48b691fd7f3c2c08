/**
 * Operational alarms and the topic they notify. What needs an operator: imports or feed deletions the
 * worker gave up on (they wait in the dead-letter queue, the feed hidden for a deletion), a search
 * domain that is red, blocks writes, runs out of disk or is short of heap or CPU, the public API failing
 * a share of its requests or answering slowly, the admin API answering 5xx, functions that crash, time
 * out or are throttled, and many failed imports in an hour.
 */
import { Annotations, Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import { Construct } from 'constructs';

export interface AlarmTopicProps {
  /** Resource name prefix of the stage (`vps-<stage>`): the topic's name and its alarms' names start with it. */
  prefix: string;
  /** Where notifications go by e-mail (the stage's `alarmEmail`); none: the alarms show in the console only. */
  email: string | undefined;
  removalPolicy: RemovalPolicy;
}

/**
 * The stage's alarm topic, encrypted with a key of its own: CloudWatch cannot publish to a topic under
 * the AWS-managed SNS key (its policy cannot be changed), so this key and the topic let CloudWatch in,
 * for this account's alarms named after the stage only.
 */
export class AlarmTopic extends Construct {
  readonly topic: sns.Topic;
  private readonly prefix: string;

  constructor(scope: Construct, id: string, props: AlarmTopicProps) {
    super(scope, id);
    const stack = Stack.of(this);
    this.prefix = props.prefix;
    const alarms = `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:${props.prefix}-*`;
    const fromAlarms = {
      StringEquals: { 'aws:SourceAccount': stack.account },
      ArnLike: { 'aws:SourceArn': alarms },
    };
    const cloudWatch = new iam.ServicePrincipal('cloudwatch.amazonaws.com');
    const key = new kms.Key(this, 'Key', {
      description: `${props.prefix} alarm notifications`,
      enableKeyRotation: true,
      removalPolicy: props.removalPolicy,
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [cloudWatch],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
        conditions: fromAlarms,
      }),
    );
    this.topic = new sns.Topic(this, 'Topic', {
      topicName: `${props.prefix}-alarms`,
      masterKey: key,
      enforceSSL: true,
    });
    this.topic.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [cloudWatch],
        actions: ['sns:Publish'],
        resources: [this.topic.topicArn],
        conditions: fromAlarms,
      }),
    );
    if (props.email) this.topic.addSubscription(new subscriptions.EmailSubscription(props.email));
    // An alarm nobody hears is no alarm: said at every synth, not left for the first outage to show.
    else
      Annotations.of(this).addWarningV2(
        'vps:alarms-unsubscribed',
        `${props.prefix}: no alarmEmail, so the alarms notify a topic nobody is subscribed to; set the ` +
          `stage's alarmEmail in infra/stages.ts, or subscribe ${props.prefix}-alarms (a pager, Chatbot) after deploying.`,
      );
  }

  /** An alarm named `<prefix>-<name>` that notifies the topic when it fires and when it clears. */
  alarm(
    scope: Construct,
    name: string,
    props: Omit<cloudwatch.AlarmProps, 'alarmName' | 'evaluationPeriods'> & { evaluationPeriods?: number },
  ): cloudwatch.Alarm {
    const alarm = new cloudwatch.Alarm(scope, `Alarm-${name}`, {
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      ...props,
      alarmName: `${this.prefix}-${name}`,
    });
    alarm.addAlarmAction(new actions.SnsAction(this.topic));
    alarm.addOkAction(new actions.SnsAction(this.topic));
    return alarm;
  }
}

/** Five-minute periods: long enough to smooth a single failed request, short enough to page in time. */
export const ALARM_PERIOD = Duration.minutes(5);

/**
 * `errors` as a percentage of `requests` per period, counted only once the period has `minErrors` errors
 * (0 below). The floor is what keeps a lone error off the pager: 1 failure of the 1 request at 3 a.m. is
 * 100%, and a rate with only a minimum-traffic guard would instead stay silent through a total outage at
 * low traffic (10 failures of 10 requests). With the floor, 5 failures of 5 requests page, and so do 5 of
 * 100 at a 5% threshold, while 20 of 10,000 (0.2%) do not. Both metrics are `Sum`s, over ALARM_PERIOD.
 */
export function errorRate(
  errors: cloudwatch.IMetric,
  requests: cloudwatch.IMetric,
  minErrors: number,
  label: string,
): cloudwatch.MathExpression {
  return new cloudwatch.MathExpression({
    // Where errors >= minErrors, requests >= errors > 0: no division by zero.
    expression: `IF(errors >= ${minErrors}, 100 * errors / requests, 0)`,
    usingMetrics: { errors, requests },
    period: ALARM_PERIOD,
    label,
  });
}
