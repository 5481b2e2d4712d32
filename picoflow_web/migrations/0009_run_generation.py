from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('picoflow_web', '0008_trace_spans'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='generation',
            field=models.PositiveIntegerField(default=0),
        ),
    ]
