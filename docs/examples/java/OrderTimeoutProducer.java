import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * Publishes "close order N if still unpaid" messages through rocketdelay: each is
 * delivered to the business topic of the topic target "orders" at its due time, with
 * its tag, keys and properties as published here.
 *
 * Usage: java OrderTimeoutProducer NAMESRV DELAY_TOPIC COUNT DELAY_MS ID_PREFIX
 */
public class OrderTimeoutProducer {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String delayTopic = args[1]; // rocketdelay's topic, "guava" unless configured otherwise
        int count = Integer.parseInt(args[2]);
        long delayMs = Long.parseLong(args[3]);
        String prefix = args[4];

        DefaultMQProducer producer = new DefaultMQProducer("order-timeout-producers");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                long dueAt = System.currentTimeMillis() + delayMs;
                // README:begin producer
                Message msg = new Message(delayTopic, "close", "order-" + i,
                        ("{\"order\":" + i + ",\"action\":\"close-if-unpaid\"}").getBytes(StandardCharsets.UTF_8));
                msg.putUserProperty("RD_TARGET", "orders");                       // a topic target
                msg.putUserProperty("RD_DELIVER_AT_MS", Long.toString(dueAt));    // or RD_DELAY_MS
                msg.putUserProperty("RD_ID", id);                                 // delivered once per id
                msg.putUserProperty("shop", "eu-1");                              // delivered as is
                SendResult result = producer.send(msg);
                if (result.getSendStatus() != SendStatus.SEND_OK) {
                    throw new IllegalStateException("not stored: " + result);     // retry it
                }
                // README:end producer
                System.out.println("published " + id + " due " + dueAt);
            }
        } finally {
            producer.shutdown();
        }
    }
}
