import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A plain consumer of the business topic: it receives each order-timeout message at its
 * due time, without knowing it was delayed. It prints one line per message:
 * "received ID MSGID RECEIVED_MS STORE_MS TAG KEYS shop=VALUE BODY".
 *
 * Usage: java OrderTimeoutConsumer NAMESRV TOPIC GROUP COUNT TIMEOUT_S
 */
public class OrderTimeoutConsumer {
    private static CountDownLatch left;

    /** Stands for the business logic: it prints what it received, for the test that runs it. */
    static void closeIfUnpaid(String id, MessageExt m) {
        if (id == null) {
            return; // not a delivered message (the topic's warm-up)
        }
        System.out.println("received " + id + " " + m.getMsgId() + " " + System.currentTimeMillis() + " "
                + m.getStoreTimestamp() + " " + m.getTags() + " " + m.getKeys().replace(' ', ',')
                + " shop=" + m.getUserProperty("shop") + " " + new String(m.getBody(), StandardCharsets.UTF_8));
        left.countDown();
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        left = new CountDownLatch(Integer.parseInt(args[3]));
        long timeoutS = Long.parseLong(args[4]);

        // README:begin consumer
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                String id = m.getUserProperty("RD_ID"); // also one of m.getKeys(): dedupe on it
                closeIfUnpaid(id, m);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        // README:end consumer
        System.out.println("consuming " + topic);
        boolean all = left.await(timeoutS, TimeUnit.SECONDS);
        consumer.shutdown();
        System.exit(all ? 0 : 1);
    }
}
