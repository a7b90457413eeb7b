from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("webhooks", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="delivery",
            options={"ordering": ["-created_at", "-pk"], "verbose_name_plural": "deliveries"},
        ),
    ]
